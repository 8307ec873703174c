"""The cluster's state file, `cluster.json`: every node as started, so another process can stop it.

`fencegate cluster up` writes it and exits; `status` and `down` read it back
(`LocalCluster.attach`). It is rewritten whole through a temporary file and a
rename after every start, restart and stop, so a reader never sees half of it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path

from fencegate.lab.cluster.errors import ClusterArgumentError
from fencegate.lab.cluster.servers import Node

STATE_FILE = "cluster.json"


def write_state(state_dir: Path, nodes: Iterable[Node], extra_dirs: list[str]) -> None:
    """Record `nodes` and the data dirs kept outside `state_dir` (PostgreSQL's when run as root)."""
    state = {"nodes": [asdict(n) for n in nodes], "extra_dirs": extra_dirs}
    tmp = state_dir / (STATE_FILE + ".tmp")
    tmp.write_text(json.dumps(state, indent=2))
    tmp.replace(state_dir / STATE_FILE)


def read_state(state_dir: Path | str) -> tuple[dict[str, Node], list[str]]:
    """The nodes (by name) and extra dirs recorded in `state_dir`; a missing or foreign file is a
    `ClusterArgumentError` that says what to do."""
    path = Path(state_dir) / STATE_FILE
    try:
        state = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise ClusterArgumentError(
            f"no cluster state at {path}: start one with `fencegate cluster up`, or give its --dir"
        ) from exc
    except (OSError, ValueError) as exc:
        raise ClusterArgumentError(f"cannot read the cluster state {path}: {exc}") from exc
    try:
        nodes = {n["name"]: Node(**n) for n in state["nodes"]}
        extra_dirs = [str(d) for d in state.get("extra_dirs", [])]
    except (TypeError, KeyError, AttributeError) as exc:
        raise ClusterArgumentError(
            f"{path} is not a cluster state written by `fencegate cluster up` ({type(exc).__name__}: "
            f"{exc}); stop its servers by hand, remove it, and start again"
        ) from exc
    return nodes, extra_dirs
