"""The lab's scenarios: fault schedules over any lock design and store (see `Deployment`)."""

from lab.protocols import Deployment
from lab.scenarios.catalog import SCENARIOS
from lab.scenarios.stage import RunPlan, Scenario, Stage, run_scenario

__all__ = ["SCENARIOS", "Deployment", "RunPlan", "Scenario", "Stage", "run_scenario"]
