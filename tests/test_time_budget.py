"""The train scripts' time budget (train_scripts/common.py: TimeBudgetCallback): wall-clock and CPU-time limits; and
the step-time markers (StepTimesCallback)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hf_seq.train_scripts import common
from transformers import TrainerControl, TrainerState, TrainingArguments


class FakeClock:
    """Stands in for time.perf_counter / time.process_time; each step advances both by the given amounts."""

    def __init__(self) -> None:
        self.wall = 0.0
        self.cpu = 0.0


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(common.time, "perf_counter", lambda: fake.wall)
    monkeypatch.setattr(common.time, "process_time", lambda: fake.cpu)
    return fake


def run_steps(
    callback, clock: FakeClock, steps: int, wall_per_step: float, cpu_per_step: float, pause_between: float = 0.0
) -> int:
    """Simulate ``steps`` training steps (with untimed pauses between them, e.g. evaluation); returns the step
    after which the callback asked training to stop (or ``steps`` if it never did)."""
    args, state = TrainingArguments(output_dir="unused", report_to="none"), TrainerState()
    for step in range(1, steps + 1):
        control = TrainerControl()
        callback.on_step_begin(args, state, control)
        clock.wall += wall_per_step
        clock.cpu += cpu_per_step
        callback.on_step_end(args, state, control)
        if control.should_training_stop:
            assert control.should_evaluate
            return step
        clock.wall += pause_between
        clock.cpu += pause_between
    return steps


def test_cpu_budget_stops_on_cpu_time_not_wall_time(clock):
    # a starved process: 10 s of wall clock but 1 s of CPU per step; 1 CPU-minute = 60 steps
    budget = common.TimeBudgetCallback(max_minutes=None, max_cpu_minutes=1.0)
    assert run_steps(budget, clock, 1000, wall_per_step=10.0, cpu_per_step=1.0) == 60
    assert budget.stopped_by_budget and budget.train_cpu_seconds == pytest.approx(60.0)
    assert budget.train_seconds == pytest.approx(600.0)


def test_wall_budget_counts_only_time_inside_steps(clock):
    # 2 s per step plus 100 s of evaluation between steps: the 1-minute budget is spent after 30 steps
    budget = common.TimeBudgetCallback(max_minutes=1.0)
    assert run_steps(budget, clock, 1000, wall_per_step=2.0, cpu_per_step=2.0, pause_between=100.0) == 30


def test_first_budget_reached_wins_and_no_budget_never_stops(clock):
    both = common.TimeBudgetCallback(max_minutes=1.0, max_cpu_minutes=0.5)
    assert run_steps(both, clock, 1000, wall_per_step=1.0, cpu_per_step=1.0) == 30
    unlimited = common.TimeBudgetCallback()
    assert run_steps(unlimited, clock, 500, wall_per_step=1.0, cpu_per_step=1.0) == 500
    assert not unlimited.stopped_by_budget


@pytest.mark.parametrize("process_zero", [True, False])
def test_step_time_markers_of_a_resumed_run(monkeypatch, capsys, process_zero):
    """StepTimesCallback, whose lines the data-scale benchmarks read: one line as the first step begins, one at the
    end with the last step and when the first step ended (a resumed run's first step is its own, not step 1); the
    other processes of a run print nothing."""
    stamps = [100.0, 101.5, 109.0]  # first step begins, first step ends, training ends
    monkeypatch.setattr(common, "time", SimpleNamespace(time=lambda: stamps.pop(0)))
    args = TrainingArguments(output_dir="unused", report_to="none")
    state = TrainerState(global_step=40, is_world_process_zero=process_zero)  # resumed from checkpoint-40
    markers = common.StepTimesCallback()
    for _ in range(3):
        markers.on_step_begin(args, state, TrainerControl())
        state.global_step += 1
        markers.on_step_end(args, state, TrainerControl())
    markers.on_train_end(args, state, TrainerControl())
    expected = [
        "[hf_seq] first training step begins at 100.000",
        "[hf_seq] training ends at 109.000 after 43 steps; first step ended at 101.500 (step 41)",
    ]
    assert capsys.readouterr().out.splitlines() == (expected if process_zero else [])
    assert stamps == ([] if process_zero else [109.0])  # one clock reading per marker, none per later step
