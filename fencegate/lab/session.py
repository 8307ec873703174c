"""A lab session: the servers a comparison needs, and its runs, one after another.

`LabSession` starts what outlives one run: the gateway (`fencegate serve`,
SQLite storage, the embedded default) and, only when asked for, ZooKeeper and
PostgreSQL for their token sources. Each run (`RunSpec`) then gets its own
redis nodes, proxies and client processes from `run_scenario`, a fresh
counter key and resource on the shared gateway, and the same seed and fault
schedule in every mode. Everything is stopped on the way out.

`plan_runs` expands scenarios x modes into runs; `token-regress` always runs
fenced, once with the redis INCR source on the restarting node and once with
a source that does not go back (the one asked for, SQLite if that was INCR).
The etcd lock design runs on a 3-member etcd cluster the session starts
(through the cluster helper) and fences with its own revisions, whatever
source was asked for; a scenario that cannot apply to a design is refused.
A run on the sql store (`RunSpec.store`) keeps its counter in a user table
on PostgreSQL (`lab.sql_deployment`): the session starts PostgreSQL for it,
as for PostgreSQL tokens, and the lock half is the same as the gateway's.
A run on an s3 store (`proxy-delay`, fenced mode only) gets two gateway
replicas of its own on the session's PostgreSQL in front of the session's
SeaweedFS (`lab.proxy_deployment`), started for the run and stopped after it.
`expected_safe` (from `lab.predictions`) is the verdict the seed documents
predict for a run.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit

from fencegate.lab.cluster import ClusterSpec, LocalCluster
from fencegate.lab.deployments import ETCD, GatewayDeployment, Locks, Mode
from fencegate.lab.errors import LabArgumentError, LabError
from fencegate.lab.gateway_process import AsyncGatewayProcess, running
from fencegate.lab.history import History, Meta
from fencegate.lab.predictions import (
    GATEWAY,
    INCR,
    PROXY_STORES,
    REGRESS,
    expected_safe,
    inapplicable,
    store_inapplicable,
)
from fencegate.lab.proxy_deployment import ProxyDeployment
from fencegate.lab.proxy_deployment import running as proxy_running
from fencegate.lab.scenarios import SCENARIOS, RunPlan, run_scenario
from fencegate.lab.scenarios.stage import PARTITION_NODES
from fencegate.lab.sql_deployment import STORES, TRIGGER, TRIGGER_MODE, SqlDeployment

TOKEN_KINDS = ("sqlite", "zookeeper", "postgres", ETCD, INCR)
ETCD_MEMBERS = 3  # the etcd cluster a session starts: a quorum survives one member down
# Where the fault itself (a restart, a promotion, a jump, a partition) eats into the holder's lease, a
# longer TTL keeps a loaded machine from closing the challenger's window; these never wait a TTL out.
LONG_TTL = frozenset({"clock-jump", "restart", "failover", "token-regress"})
LONG_TTL_FACTOR = 3.0
HISTORY_FILE = "history.jsonl"  # each run's merged history, in its directory under the session's runs/
POSTGRES = "postgres"  # the server kind the sql stores share with PostgreSQL tokens
S3 = "s3"  # the server kind of the s3 stores: SeaweedFS (beside PostgreSQL, for their replicas' marks)
PROXY_MODE = "fenced"  # the one mode the s3 stores run: both rows lease and fence; the store's CAS differs
# `--store` -> the stores its runs use: the gateway's built-in store, the user tables on PostgreSQL, both
STORE_CHOICES: dict[str, tuple[str, ...]] = {
    GATEWAY: (GATEWAY,),
    "sql": tuple(STORES),
    "s3": PROXY_STORES,
    "all": (GATEWAY, *STORES, *PROXY_STORES),
}


@dataclass(frozen=True)
class RunSpec:
    """One run of a comparison."""

    scenario: str
    mode: Mode
    design: str
    tokens: str | None  # one of TOKEN_KINDS; None in lock-only mode
    seed: int
    store: str = GATEWAY  # where the counter lives: the gateway, or one of the sql stores

    @property
    def name(self) -> str:
        store = "" if self.store == GATEWAY else f"-{self.store}"
        return f"{self.scenario}-{self.mode}-{self.design}-{self.tokens or 'none'}{store}-s{self.seed}"

    @property
    def lock(self) -> str:
        """The lock design, under the name a recorded run's `Meta` gives it."""
        return self.design


def plan_runs(
    scenarios: Iterable[str],
    modes: Sequence[Mode],
    *,
    design: str,
    tokens: str,
    seeds: Iterable[int],
    store: str = GATEWAY,
) -> list[RunSpec]:
    """Every run of a comparison, seed by seed, each scenario in every mode asked for, on one store."""
    runs = []
    if design == ETCD:
        tokens = ETCD  # the lock key's create revision is the token; no second source
    for seed in seeds:
        for scenario in scenarios:
            if scenario not in SCENARIOS:
                raise LabError(f"unknown scenario {scenario!r}: see `fencegate lab scenarios`")
            why = inapplicable(design, scenario)
            if why is not None:
                raise LabArgumentError(f"--scenario {scenario} does not apply to --lock {design}: it {why}")
            why = store_inapplicable(store, scenario)
            if why is not None:
                raise LabArgumentError(f"--scenario {scenario} {why}")
            if scenario == REGRESS:
                stable = "sqlite" if tokens == INCR else tokens
                runs += [RunSpec(scenario, "fenced", design, kind, seed) for kind in (INCR, stable)]
                continue
            runs += [
                RunSpec(scenario, mode, design, None if mode == "lock-only" else tokens, seed, store)
                for mode in modes
                if store != TRIGGER or mode == TRIGGER_MODE  # lab.sql_deployment says why
                if store not in PROXY_STORES or mode == PROXY_MODE
            ]
    return runs


def servers_for(specs: Iterable[RunSpec]) -> set[str]:
    """The server kinds a comparison needs: its token sources, etcd for the etcd design's lock, and
    PostgreSQL for the sql stores' tables."""
    kinds: set[str] = set()
    for spec in specs:
        kinds |= {spec.tokens} if spec.tokens is not None else set()
        kinds |= {ETCD} if spec.design == ETCD else set()
        kinds |= {POSTGRES} if spec.store != GATEWAY else set()
        kinds |= {S3} if spec.store in PROXY_STORES else set()
    return kinds


def one_node_note(scenarios: Iterable[str], design: str) -> str | None:
    """What to tell a user who runs a five-node scenario on a one-node lock design (None: nothing)."""
    if design in ("redlock", ETCD):
        return None
    partitioned = [name for name in scenarios if SCENARIOS[name].partitioned]
    if not partitioned:
        return None
    return (
        f"{', '.join(partitioned)} need {PARTITION_NODES} lock nodes for their five-node version (the holder "
        f"reaches A, B, C, the next client C, D, E); --lock {design} has one node, so they run the one-node "
        "version: the fault hits the only node"
    )


class LabSession:
    """The gateway and the token servers of one comparison; `run` one spec at a time."""

    def __init__(
        self,
        workdir: Path,
        gateway: AsyncGatewayProcess | None,
        servers: LocalCluster,
        token_urls: Mapping[str, str],
        *,
        address: tuple[str, int] | None = None,
        s3: Mapping[str, str] | None = None,
    ) -> None:
        self.workdir = workdir
        self.gateway = gateway  # None when the session writes to a deployment it did not start
        if address is None:
            if gateway is None:
                raise LabError("a lab session needs its own gateway or the address of one")
            address = gateway.address
        self.address = address
        self._servers = servers
        self._token_urls = dict(token_urls)
        self._s3 = s3

    @classmethod
    @contextlib.asynccontextmanager
    async def open(
        cls,
        workdir: Path,
        *,
        token_kinds: Iterable[str] = (),
        token_urls: Mapping[str, str] | None = None,
        gateway_url: str | None = None,
        s3: Mapping[str, str] | None = None,
    ) -> AsyncIterator[LabSession]:
        """Start the gateway, and ZooKeeper, PostgreSQL or etcd for the `token_kinds` that need them.

        `token_urls` names servers that already run for some kinds (kind -> source URL); those are not
        started (the test suite shares its session-wide ZooKeeper and PostgreSQL this way).
        `gateway_url` points the runs at a gateway that already runs (a deployment's load balancer)
        instead of starting one. `s3` is a SeaweedFS that already runs (the cluster's endpoints entry);
        without it, kind "s3" starts one.
        """
        given = dict(token_urls or {})
        kinds = set(token_kinds) - set(given) - {S3}
        start_s3 = S3 in token_kinds and s3 is None
        unknown = (kinds | set(given)) - set(TOKEN_KINDS)
        if unknown:
            raise LabError(f"unknown token source {sorted(unknown)}: use one of {', '.join(TOKEN_KINDS)}")
        spec = ClusterSpec(
            redis=0,
            zookeeper="zookeeper" in kinds,
            postgres="postgres" in kinds,
            etcd=ETCD_MEMBERS if ETCD in kinds else 0,
            s3=start_s3,
        )
        async with LocalCluster.running_async(spec, workdir / "servers") as servers:
            store = servers.s3 if start_s3 else s3
            if gateway_url is not None:
                yield cls(workdir, None, servers, given, address=_address(gateway_url), s3=store)
                return
            async with running(workdir / "gateway") as gateway:
                yield cls(workdir, gateway, servers, given, s3=store)

    def token_url(self, kind: str) -> str:
        if kind in self._token_urls:
            return self._token_urls[kind]
        if kind == "sqlite":
            return f"sqlite:///{(self.workdir / 'tokens.db').resolve()}"
        if kind == "zookeeper":
            return f"zookeeper://{self._servers.zookeeper}"  # the cluster says so if it was not started
        if kind == "postgres":
            return self._servers.postgres_dsn
        if kind == ETCD:
            return self._servers.etcd
        if kind == INCR:
            return INCR
        raise LabError(f"unknown token source {kind!r}: use one of {', '.join(TOKEN_KINDS)}")

    async def run(self, spec: RunSpec, plan: RunPlan) -> History:
        """One run: its history, checked by the caller, and kept as RUN_DIR/history.jsonl for `lab report`."""
        run_id = f"{spec.name}-{time.monotonic_ns() % 10**9}"
        tokens = None if spec.tokens is None else self.token_url(spec.tokens)
        lock_url = self.token_url(ETCD) if spec.design == ETCD else None
        if spec.store in PROXY_STORES:
            return await self._run_proxied(spec, plan, run_id, tokens, lock_url)
        deployment: GatewayDeployment | SqlDeployment
        if spec.store == GATEWAY:
            deployment = GatewayDeployment(
                mode=spec.mode,
                design=spec.design,
                gateway=self.address,
                key=f"lab/{run_id}/counter",
                resource=f"lab-{run_id}",
                tokens=tokens,
                lock_url=lock_url,
            )
        else:
            locks = Locks(spec.mode, spec.design, tokens, lock_url)
            url = self.token_url(POSTGRES)
            deployment = SqlDeployment(locks, spec.store, url, resource=f"lab-{run_id}")
        return await self._run_on(deployment, spec, plan, run_id)

    async def _run_proxied(
        self, spec: RunSpec, plan: RunPlan, run_id: str, tokens: str | None, lock_url: str | None
    ) -> History:
        """A run on an s3 store: its two replicas live as long as the run."""
        if self._s3 is None:
            raise LabError(f"the {spec.store} store needs SeaweedFS: open the session with token kind {S3!r}")
        gateway = GatewayDeployment(
            mode=spec.mode, design=spec.design, gateway=self.address, key=f"lab/{run_id}/counter",
            resource=f"lab-{run_id}", tokens=tokens, lock_url=lock_url,
        )  # fmt: skip
        workdir = self.workdir / "runs" / run_id
        workdir.mkdir(parents=True, exist_ok=True)
        dsn = self.token_url(POSTGRES)
        async with proxy_running(gateway, spec.store, s3=self._s3, dsn=dsn, workdir=workdir) as deployment:
            return await self._run_on(deployment, spec, plan, run_id)

    async def _run_on(
        self, deployment: GatewayDeployment | SqlDeployment | ProxyDeployment, spec: RunSpec, plan: RunPlan,
        run_id: str,
    ) -> History:  # fmt: skip
        await deployment.seed()
        ttl = plan.ttl * LONG_TTL_FACTOR if spec.scenario in LONG_TTL else plan.ttl
        run_plan = replace(plan, ttl=ttl, seed=spec.seed, resource=deployment.resource)
        meta = Meta(
            spec.scenario,
            spec.mode,
            spec.design,
            spec.seed,
            tokens=spec.tokens,
            clients=plan.clients,
            store=spec.store,
        )
        workdir = self.workdir / "runs" / run_id
        history = await run_scenario(
            SCENARIOS[spec.scenario], deployment, plan=run_plan, meta=meta, workdir=workdir
        )
        history.dump(workdir / HISTORY_FILE)
        return history


def _address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    if parts.scheme != "http" or parts.hostname is None or parts.port is None:
        raise LabError(f"gateway URL {url!r} must look like http://HOST:PORT")
    return parts.hostname, parts.port


__all__ = [
    "ETCD_MEMBERS",
    "STORE_CHOICES",
    "TOKEN_KINDS",
    "LabSession",
    "RunSpec",
    "expected_safe",
    "one_node_note",
    "plan_runs",
    "servers_for",
]
