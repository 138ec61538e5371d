"""The metadata store: committed offsets, segments, specs, runs, task reports and the audit log.

`MetadataStore` is the database (`database.Database`: engine, sessions, schema check and upgrade, planning
lock) with one repository per noun as attributes: `datasources` (state, spec history, the row lock), `runs`
(and task groups, deadlines, expiry), `offsets` (committed offsets and claimed ranges, read), `segment_records`,
`reports` (task reports) and `audit_log`: callers name the repository (`store.runs.get(...)`). What moves the
committed offsets is `main_line.MainLine`; the publish's own SQL is in `publisher`. The tables are in `schema`,
the records read from them in `records`.

Exactly-once rests on three things: each datasource row carries a `commit_version` that every move of its
committed offsets bumps with a compare-and-swap, that transaction locks the row first (`SELECT ... FOR UPDATE`
on PostgreSQL; SQLite transactions are `BEGIN IMMEDIATE`, so writers serialize on the database lock), and the
offset ranges every publish claims (`published_ranges`), which no other publish may overlap.
"""

from __future__ import annotations

from ingest_core.store.audit import AuditLog
from ingest_core.store.database import Database
from ingest_core.store.datasources import Datasources
from ingest_core.store.dead_letters import DeadLetterFiles
from ingest_core.store.engines import shared_engine
from ingest_core.store.offsets import Offsets
from ingest_core.store.runs import Runs
from ingest_core.store.segments import SegmentRecords
from ingest_core.store.task_reports import TaskReports


class MetadataStore(Database):
    # The repositories are views over this database, made per use: a store keeps no reference cycle, so a
    # dropped one is freed at once, and its engine's connections with it.

    @property
    def datasources(self) -> Datasources:
        return Datasources(self)

    @property
    def runs(self) -> Runs:
        return Runs(self)

    @property
    def offsets(self) -> Offsets:
        return Offsets(self)

    @property
    def segment_records(self) -> SegmentRecords:
        return SegmentRecords(self)

    @property
    def dead_letter_files(self) -> DeadLetterFiles:
        return DeadLetterFiles(self)

    @property
    def reports(self) -> TaskReports:
        return TaskReports(self)

    @property
    def audit_log(self) -> AuditLog:
        return AuditLog(self)

    @classmethod
    def shared(cls, url: str) -> MetadataStore:
        """A store on this process's one engine for `url` (`engines.shared_engine`, disposed at exit): for
        code that opens the store per task or per request."""
        return cls(url, shared_engine(url))
