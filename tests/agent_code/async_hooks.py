"""Factories for AsyncGRPOTrainer's `rollout_worker=` / `weight_transfer=` (tests/test_agents_async_hooks.py): an
in-process worker holding TRL's two queues and a weight transfer that sends nothing."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from typing import Any


class QueueWorker:
    """RolloutWorkerProtocol with nothing producing: the queues TRL drains, start/stop/health/version."""

    def __init__(self, train_dataset: Any) -> None:
        self.rollout_buffer: queue.Queue[Any] = queue.Queue()
        self.metrics_queue: queue.Queue[Any] = queue.Queue()
        self.dataset, self.version, self.running = train_dataset, 0, False

    def start(self) -> None:
        self.running = True

    def stop(self) -> None:
        self.running = False

    def update_model_version(self, model_version: int) -> None:
        self.version = model_version

    def check_health(self, stale_after_s: float) -> None:
        if not self.running:
            raise RuntimeError("worker stopped")


class NoTransfer:
    """WeightTransferProtocol that sends nothing (a worker that updates its policy itself)."""

    def __init__(self) -> None:
        self.sent = 0

    def init_weight_transfer(self) -> None:
        pass

    def pause(self) -> None:
        pass

    def send_weights(self, iterator: Iterator[tuple[str, Any]]) -> None:
        self.sent += sum(1 for _ in iterator)

    def resume(self) -> None:
        pass

    def destroy(self) -> None:
        pass


def worker(model: str, args: Any, train_dataset: Any, reward_funcs: list[Any], **kwargs: Any) -> QueueWorker:
    return QueueWorker(train_dataset)


def transfer(**kwargs: Any) -> NoTransfer:
    return NoTransfer()


def lacks_arguments(model: str) -> NoTransfer:
    return NoTransfer()
