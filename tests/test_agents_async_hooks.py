"""AsyncGRPOTrainer's `rollout_worker=` and `weight_transfer=` from the spec (agent.rollout_worker /
agent.weight_transfer): validated before launch (async only, importable, callable with the job's keyword
arguments) and built by the job's own code; the objects implement TRL's protocols. No async step runs here: the
trainer's constructor needs CUDA (tests/test_agents_training.py shows where it stops)."""

from __future__ import annotations

import sys
from pathlib import Path

from grpo_dashboard.launch.runs import validate
from grpo_dashboard.spec.run_spec import RunSpec

REPO = Path(__file__).resolve().parent.parent
HOOKS = "tests.agent_code.async_hooks"
sys.path.insert(0, str(REPO / "jobs"))


def async_spec(**agent: object) -> RunSpec:
    spec = RunSpec.from_file(REPO / "examples" / "agent_calculator.yaml").to_dict()
    spec["dataset"]["data_files"] = str(REPO / spec["dataset"]["data_files"])
    spec["agent"].update(trainer="async_grpo", async_config={"max_staleness": 2}, **agent)
    spec["rewards"] = [{"name": "answer", "function": "tests.agent_code.failing_tools:answer_reward"}]
    del spec["training"]["beta"]
    return RunSpec.from_dict(spec)


def hook_errors(spec: RunSpec) -> dict[str, str]:
    return {e.field: e.message for e in validate(spec, REPO).errors if e.field.startswith("agent.")}


def test_hooks_are_validated_and_built_as_the_job_builds_them() -> None:
    good = async_spec(rollout_worker=f"{HOOKS}:worker", weight_transfer=f"{HOOKS}:transfer")
    assert hook_errors(good) == {}
    bad = hook_errors(async_spec(weight_transfer=f"{HOOKS}:lacks_arguments", rollout_worker=f"{HOOKS}:nope"))
    assert "lacks ['args', 'train_dataset', 'reward_funcs']" in bad["agent.weight_transfer"]
    assert "cannot be imported" in bad["agent.rollout_worker"] and "'nope'" in bad["agent.rollout_worker"]
    plain = RunSpec.from_dict({**async_spec().to_dict(), "agent": {"tools": ["calculator"], "tiny_warmup": True}})
    plain.agent.rollout_worker = f"{HOOKS}:worker"
    assert "applies only to `agent.trainer: async_grpo`" in hook_errors(plain)["agent.rollout_worker"]

    import grpo_agents
    from trl.experimental.async_grpo.async_grpo_trainer import RolloutWorkerProtocol, WeightTransferProtocol

    agent = good.to_job_dict()["agent"]
    built = grpo_agents.async_hooks(agent, REPO, model="m", args=None, train_dataset=[1, 2], reward_funcs=[])
    worker, transfer = built["rollout_worker"], built["weight_transfer"]
    for obj, protocol in ((worker, RolloutWorkerProtocol), (transfer, WeightTransferProtocol)):
        wanted = {n for n in dir(protocol) if not n.startswith("_")}
        assert wanted <= set(dir(obj)), wanted - set(dir(obj))
    worker.start()
    worker.check_health(1.0)
    assert worker.dataset == [1, 2] and worker.rollout_buffer.qsize() == 0
    assert grpo_agents.async_hooks({**agent, "trainer": "grpo"}, REPO) == {}
