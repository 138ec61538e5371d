"""The soak's report: each run and iteration, and the summary it prints (lost, duplicated, healed)."""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import asdict, dataclass, field, fields


@dataclass
class RunResult:
    """One `airflow dags test` (or `airflow tasks test`) the soak started."""

    label: str
    iteration: int | None
    fault: str
    run_id: str | None
    exit_code: int | None
    seconds: float
    killed: bool  # by the soak, on purpose
    log: str


@dataclass
class Iteration:
    index: int
    fault: str
    params: dict
    fired: bool
    detail: str
    produced: int
    lag_after: int | None
    in_flight_after: list[str]
    duplicated_so_far: int
    unreadable_so_far: int


@dataclass
class Report:
    seed: int
    iterations: int
    spark: str = "spark-submit"  # or "Spark Connect"
    faults: Counter = field(default_factory=Counter)
    fired: Counter = field(default_factory=Counter)
    runs: list[RunResult] = field(default_factory=list)
    log: list[Iteration] = field(default_factory=list)
    heal_runs: int = 0
    runs_to_heal: int | None = None  # None: not healed within --heal-runs
    produced: int = 0
    undelivered: int = 0  # records the broker never acknowledged (not expected anywhere)
    visible_rows: int = 0
    lost: int = 0
    duplicated: int = 0  # rows beyond the first of a uid
    unexpected: int = 0  # rows whose uid was never acknowledged
    hostile_produced: int = 0
    hostile_wrong: list[str] = field(default_factory=list)  # hostile uids visible when they must not be, or not once
    unreadable_segments: list[str] = field(default_factory=list)
    lost_by_fault: dict = field(default_factory=dict)  # producing iteration's fault -> lost uids
    # the operator fault: offsets it moved past unread (the soak's own ranges), the store's lost counter, the
    # acknowledged records in those ranges (each must be invisible), and any of them visible after all
    lost_expected: dict = field(default_factory=dict)  # partition -> offsets
    lost_counted: dict = field(default_factory=dict)  # partition -> the store's lostRecords
    lost_on_purpose: int = 0  # acknowledged uids (not hostile) in the ranges, invisible as they must be
    lost_records_seen: int = 0  # acknowledged records (hostile too) in the ranges
    lost_but_visible: list[str] = field(default_factory=list)
    # acknowledged into a topic the operator deleted before any run read them: gone with the topic, nobody's loss
    destroyed: int = 0
    # --iceberg: rows the Iceberg table holds other than the reader's (each uid as often), and its files
    iceberg_mismatch: int | None = None
    iceberg_files: int | None = None
    duplicated_by_run: dict = field(default_factory=dict)  # run id -> duplicate rows in its segments
    final_lag: int | None = None
    in_flight_at_end: list[str] = field(default_factory=list)
    # --s3: what cleanup removed at the end, then what it left: attempt folders of final runs nothing points
    # into, and incomplete multipart uploads under final runs (both must be 0)
    orphans_removed: int | None = None
    orphans_left: int | None = None
    uploads_aborted: int | None = None
    uploads_left: int | None = None

    @property
    def healed(self) -> bool:
        return self.runs_to_heal is not None

    @property
    def ok(self) -> bool:
        return (self.healed and not self.lost and not self.duplicated and not self.unexpected
                and not self.unreadable_segments and not self.hostile_wrong and self.loss_counted_exactly
                and not self.iceberg_mismatch and not self.orphans_left and not self.uploads_left)

    @property
    def loss_counted_exactly(self) -> bool:
        """Every offset the operator moved past is counted by the store, no more, and was a real record."""
        return (self.lost_counted == self.lost_expected and not self.lost_but_visible
                and self.lost_records_seen == sum(self.lost_expected.values()))

    @property
    def failed_runs(self) -> list[RunResult]:
        """Runs that ended other than with exit 0, the soak's own kills included."""
        return [r for r in self.runs if r.exit_code != 0]

    @property
    def median_run_s(self) -> float | None:
        done = [r.seconds for r in self.runs if r.exit_code == 0 and r.label.startswith("dags test")]
        return statistics.median(done) if done else None

    def summary(self) -> str:
        killed = sum(r.killed for r in self.failed_runs)
        faults = ", ".join(f"{k} {n} (fired {self.fired[k]})" for k, n in sorted(self.faults.items()))
        heal = (f"{self.runs_to_heal}" if self.healed else f"NOT HEALED after {self.heal_runs} clean runs "
                f"(lag {self.final_lag}, in flight: {', '.join(self.in_flight_at_end) or 'none'})")
        median = f"{self.median_run_s:.1f} s" if self.median_run_s is not None else "-"
        lines = [
            f"seed {self.seed}, {self.iterations} iterations, jobs on {self.spark}",
            f"runs: {len(self.runs)} ({sum(r.label.startswith('dags test') for r in self.runs)} DAG runs, "
            f"{sum(r.label.startswith('tasks test') for r in self.runs)} task re-executions)",
            f"faults: {faults}",
            f"failed runs: {len(self.failed_runs)} ({killed} killed by the soak, "
            f"{len(self.failed_runs) - killed} failed on their own)",
            f"runs to heal: {heal}",
            f"produced: {self.produced} acknowledged records ({self.undelivered} not acknowledged); "
            f"visible rows: {self.visible_rows}",
            f"lost: {self.lost}" + (f" {self.lost_by_fault}" if self.lost else ""),
            f"lost on purpose (operator): {sum(self.lost_expected.values())} offsets {self.lost_expected} "
            f"({self.lost_records_seen} acknowledged records, {self.lost_on_purpose} of them good); the store counted "
            f"{self.lost_counted}: {'exact' if self.loss_counted_exactly else 'WRONG'}"
            + (f"; visible though lost: {self.lost_but_visible[:5]}" if self.lost_but_visible else "")
            + (f"; {self.destroyed} unread records deleted with the re-created topic" if self.destroyed else ""),
            f"duplicated: {self.duplicated}" + (f" {self.duplicated_by_run}" if self.duplicated else ""),
            *([f"iceberg: {self.iceberg_files} files, rows other than the reader's: {self.iceberg_mismatch}"]
              if self.iceberg_mismatch is not None else []),
            *([f"object store: cleanup removed {self.orphans_removed} orphan attempts ({self.uploads_aborted} "
               f"incomplete uploads aborted); left: {self.orphans_left} orphans, {self.uploads_left} incomplete "
               "uploads"] if self.orphans_left is not None else []),
            f"unexpected: {self.unexpected}, unreadable segments: {len(self.unreadable_segments)}",
            f"hostile records: {self.hostile_produced} produced, {len(self.hostile_wrong)} not as Druid counts them"
            + (f" {self.hostile_wrong[:10]}" if self.hostile_wrong else ""),
            f"median run time: {median}",
            f"result: {'PASS' if self.ok else 'FAIL'}",
        ]
        return "\n".join(lines)

    def to_json(self) -> dict:
        # not asdict(self): it rebuilds a Counter from (key, value) pairs, counting the pairs
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out.update(faults=dict(self.faults), fired=dict(self.fired), runs=[asdict(r) for r in self.runs],
                   log=[asdict(e) for e in self.log])
        out.update(healed=self.healed, ok=self.ok, failed_runs=len(self.failed_runs), median_run_s=self.median_run_s)
        return out
