"""Drive a gateway with wrk (Debian's package): fenced PUTs, 64-byte bodies; or plain GETs of them.

Every request writes a fresh key under one of 1,024 resources with token 1,
so none is refused whatever order the connections deliver in, and every one
is a durable fenced write that raises (or meets) a mark shared with other
connections, as many clients of a few hot locks would.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

SCRIPT = r"""
-- every request writes a key of its own (<prefix>t<tid>-<n>) under one of 1,024 resources
-- with token 1: the fence check and the write both run, and no request can be refused
-- whatever order connections deliver in; the prefix keeps the keys of runs on one database apart.
-- Optional: a prefix for the resources too, and an API key (gateways started with --api-keys).
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end
local prefix, resources, auth = "", "", ""
function init(args)
  prefix = args[1] or ""
  resources = args[2] or ""
  auth = args[3] or ""
end
local counter = 0
local body = string.rep("x", 64)
function request()
  counter = counter + 1
  local key = prefix .. "t" .. tid .. "-" .. counter
  local headers = {["Fencing-Token"] = "1", ["Fencing-Resource"] = resources .. "r" .. (counter % 1024),
                   ["Content-Type"] = "application/octet-stream"}
  if auth ~= "" then
    headers["Authorization"] = "Bearer " .. auth
  end
  return wrk.format("PUT", "/v1/objects/" .. key, headers, body)
end
"""
DONE = r"""
function done(summary, latency, requests)
  io.write(string.format("JSON p50=%f p99=%f non2xx=%d errors=%d\n",
    latency:percentile(50), latency:percentile(99), summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
"""
READ_SCRIPT = r"""
-- plain GETs (no token) of 64 keys a PUT run with the same prefix wrote: <prefix>t1-2 .. t1-65
-- (wrk builds one request per thread that it never sends: key t1-1 may not exist)
local prefix, auth = "", ""
function init(args)
  prefix = args[1] or ""
  auth = args[3] or ""
end
function request()
  local headers = {}
  if auth ~= "" then
    headers["Authorization"] = "Bearer " .. auth
  end
  return wrk.format("GET", "/v1/objects/" .. prefix .. "t1-" .. math.random(2, 65), headers)
end
"""


@dataclass(frozen=True)
class WrkResult:
    requests: int
    requests_per_s: float
    p50_ms: float
    p99_ms: float
    non_2xx: int
    errors: int


def wrk_available() -> bool:
    return shutil.which("wrk") is not None


def run_wrk(
    url: str,
    *,
    seconds: float,
    connections: int,
    workdir: Path,
    prefix: str = "",
    resource_prefix: str = "",
    api_key: str = "",
    reads: bool = False,
) -> WrkResult:
    """PUT through `url` for `seconds`; keys start with `prefix`, resources (shared unless
    `resource_prefix` sets them apart) with `resource_prefix`; `api_key` is sent as a Bearer token.
    With `reads`, GET 64 of the keys an earlier PUT run with the same `prefix` wrote instead."""
    # a script per run: two runs at once in one folder (two replicas) must not read a half-written one
    script = workdir / f"{prefix}{'get' if reads else 'put'}.lua"
    script.write_text((READ_SCRIPT if reads else SCRIPT) + DONE)
    out = subprocess.run(
        ["wrk", "-t2", f"-c{connections}", f"-d{max(1, round(seconds))}s", "-s", str(script),
         url, "--", prefix, resource_prefix, api_key],
        capture_output=True, text=True, check=True, timeout=seconds + 60,
    ).stdout  # fmt: skip
    count = re.search(r"(\d+) requests in", out)
    rate = re.search(r"Requests/sec:\s+([\d.]+)", out)
    stats = re.search(r"JSON p50=([\d.]+) p99=([\d.]+) non2xx=(\d+) errors=(\d+)", out)
    if count is None or rate is None or stats is None:
        raise RuntimeError(f"could not read wrk's output:\n{out}")
    return WrkResult(
        int(count.group(1)), float(rate.group(1)), float(stats.group(1)) / 1000, float(stats.group(2)) / 1000,
        int(stats.group(3)), int(stats.group(4)),
    )  # fmt: skip
