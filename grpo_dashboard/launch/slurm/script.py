"""The batch script of a Slurm run: #SBATCH options, each node's role, and one launcher step per node.

Pure: builds text and argument lists, writes nothing (the backend, `slurm.py`, writes the script and the vLLM
supervisor's plan into the run directory and submits them). Launcher command lines keep the per-node values
(`$SLURM_PROCID`, the main process's address and port) as shell variables, every other argument quoted.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from grpo_dashboard.launch import vllm_server
from grpo_dashboard.launch.local.job import accelerate_config_path
from grpo_dashboard.launch.logs import log_path
from grpo_dashboard.spec.jobfiles import JOB_SCRIPT
from grpo_dashboard.spec.run_spec import RunSpec, processes_per_node, server_nodes, training_nodes, world_size
from grpo_dashboard.spec.slurm_options import sbatch_options
from grpo_dashboard.spec.vllm_serve import serve_command
from grpo_dashboard.store.db import Run

BATCH_SCRIPT = "job.sbatch"


class Var(str):
    """A shell variable in a launcher command line: written as "$NAME", every other argument is quoted."""


def shell_line(args: list[str]) -> str:
    """One shell command line: Var arguments as "${NAME}", the others quoted."""
    return " ".join(f'"${{{a}}}"' if isinstance(a, Var) else shlex.quote(a) for a in args)


def launcher_command(spec: RunSpec, config_path: Path, metrics_path: Path) -> list[str]:
    """What each training node runs: one launcher per node, with its rank from SLURM_PROCID when there are several.

    One node: the same command as a local run (python, or `accelerate launch` over the node's GPUs). Several nodes:
    `accelerate launch --num_machines N --machine_rank $SLURM_PROCID` over every GPU, or, on CPU-only nodes,
    `torchrun --nnodes N --node_rank $SLURM_PROCID --nproc_per_node 1` (accelerate starts a single process on CPU).
    """
    job = [str(JOB_SCRIPT), "--config", str(config_path), "--metrics", str(metrics_path)]
    b, nodes, per_node = spec.backend, training_nodes(spec), processes_per_node(spec)
    gpus = bool(b.gpus_per_node)
    main = ["--main_process_ip", Var("MAIN_ADDR"), "--main_process_port", Var("MAIN_PORT")]
    if not gpus:
        if nodes == 1:
            return [sys.executable, *job]
        return [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes",
            str(nodes),
            "--node_rank",
            Var("SLURM_PROCID"),
            "--nproc_per_node",
            "1",
            "--master_addr",
            Var("MAIN_ADDR"),
            "--master_port",
            Var("MAIN_PORT"),
            *job,
        ]
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", str(world_size(spec))]
    if nodes > 1:
        cmd += ["--num_machines", str(nodes), "--machine_rank", Var("SLURM_PROCID"), *main]
    if b.accelerate_config:
        cmd += ["--config_file", accelerate_config_path(b.accelerate_config)]
    elif per_node * nodes > 1:
        cmd.append("--multi_gpu")
    return [*cmd, *job]


def batch_script(spec: RunSpec, run: Run) -> str:
    """The whole batch script of a run: #SBATCH options, the nodes' roles, and one launcher step per node (with a
    generation section, the vLLM server step on the first node(s) and the supervisor that ties the two together)."""
    return batch_files(spec, run)[0]


def batch_files(spec: RunSpec, run: Run) -> tuple[str, vllm_server.Plan | None]:
    """The batch script, and the supervisor's plan (written beside it as generation.json) in server mode."""
    run_dir = Path(run.run_dir)
    metrics = run_dir / "metrics.jsonl"
    served, nodes = server_nodes(spec), training_nodes(spec)
    config = run_dir / (vllm_server.SERVED_CONFIG if spec.generation is not None else "run.yaml")
    options = [*sbatch_options(spec, run.id), f"--output={log_path(run)}", "--open-mode=append", f"--chdir={run_dir}"]
    free_port = (
        f'{shlex.quote(sys.executable)} -c \'import socket; s = socket.socket(); s.bind(("", 0)); '
        f"print(s.getsockname()[1])'"
    )
    lines = [
        "#!/bin/bash",
        f"# GRPO Dashboard run {run.id} ({spec.name}). Submit again with:",
        f"#   sbatch {shlex.quote(str(run_dir / BATCH_SCRIPT))}",
        *(f"#SBATCH {o}" for o in options),
        "",
        "set -euo pipefail",
        'mapfile -t NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST")',
        "node_addr() {  # the address Slurm reaches a node at (NodeAddr), for the rendezvous",
        '    local info; info=$(scontrol show node --oneliner "$1")',
        '    if [[ $info =~ NodeAddr=([^ ]+) ]]; then echo "${BASH_REMATCH[1]}"; else echo "$1"; fi',
        "}",
        f'TRAIN_NODES=$(IFS=,; echo "${{NODES[*]:{served}:{nodes}}}")',
        f'MAIN_ADDR=$(node_addr "${{NODES[{served}]}}")',
        # The batch step runs on the first node: a port free there when it is the main node, else one per job.
        f"MAIN_PORT=$({free_port})" if served == 0 else "MAIN_PORT=$(( 20000 + SLURM_JOB_ID % 20000 ))",
        "export MAIN_ADDR MAIN_PORT",
        f'echo "grpo-dashboard: Slurm job $SLURM_JOB_ID: training on $TRAIN_NODES ({world_size(spec)} '
        f'process(es)), main process $MAIN_ADDR:$MAIN_PORT"',
    ]
    launcher = shell_line(launcher_command(spec, config, metrics))
    train_step = ["srun", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=1"]
    if spec.generation is None:
        lines.append(f"exec {shell_line([*train_step, 'bash', '-c', f'exec {launcher}'])}")
        return "\n".join(lines) + "\n", None
    g = spec.generation
    server_step = [
        "srun",
        f"--nodes={served}",
        f"--ntasks={served}",
        "--ntasks-per-node=1",
        "--nodelist=@SERVER_NODES@",
        *serve_command(spec),
    ]
    train = [*train_step, "--nodelist=@TRAIN_NODES@", "bash", "-c", f"exec {launcher}"]
    plan = vllm_server.Plan(
        server_step,
        train,
        g.port,
        g.health_timeout_s,
        str(run_dir / vllm_server.SERVER_LOG),
        str(run_dir / "run.yaml"),
        str(config),
        str(metrics),
    )
    plan_path = run_dir / vllm_server.PLAN
    lines += [
        f'SERVER_NODES=$(IFS=,; echo "${{NODES[*]:0:{served}}}")',
        'SERVER_ADDR=$(node_addr "${NODES[0]}")',
        "# The server step on the first node(s), training on the rest; both stop together (vllm_server.py).",
        "exec "
        + shell_line(
            [
                *vllm_server.supervisor_command(plan_path, "@")[:-1],
                Var("SERVER_ADDR"),
                "--server-nodes",
                Var("SERVER_NODES"),
                "--train-nodes",
                Var("TRAIN_NODES"),
            ]
        ),
    ]
    return "\n".join(lines) + "\n", plan
