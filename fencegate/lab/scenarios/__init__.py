"""The lab's scenarios: fault schedules over any lock design and store (see `Deployment`)."""

from fencegate.lab.protocols import Deployment
from fencegate.lab.scenarios.catalog import SCENARIOS
from fencegate.lab.scenarios.stage import RunPlan, Scenario, Stage, run_scenario

__all__ = ["SCENARIOS", "Deployment", "RunPlan", "Scenario", "Stage", "run_scenario"]
