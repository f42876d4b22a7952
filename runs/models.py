"""Runs, the events the engine sends back, and what the dashboards read from them.

A Run is launched in the browser or the API, dispatched by a Celery task to Ray (docs/runs.md) and
filled by ingestion: every engine event is stored once per (run, seq) in RunEvent, and the events
that dashboards read are also spread into indexed rows (StepMetric, Rollout, Checkpoint). A
rollout's summary is a narrow, indexed row; its body (turns, verdicts, output files) lives apart in
RolloutBody so lists never load transcripts.

Writes go through runs/services, reads through runs/selectors; models hold no business logic.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

from tasks_authoring.models import ExportProgress, TaskSet, TaskVersion


class RunKind(models.TextChoices):
    EVAL = "eval", "Evaluation"
    VALIDATE = "validate", "Validation"
    TRAIN = "train", "Training"


class RunStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    STARTING = "starting", "Starting"
    RUNNING = "running", "Running"
    CANCELLING = "cancelling", "Cancelling"
    CANCELLED = "cancelled", "Cancelled"
    FAILED = "failed", "Failed"
    SUCCEEDED = "succeeded", "Succeeded"
    # The in-run health gate tripped with on_trip="pause": a checkpoint is kept, a researcher resumes it.
    PAUSED = "paused", "Paused"


ACTIVE_STATUSES = (RunStatus.QUEUED, RunStatus.STARTING, RunStatus.RUNNING, RunStatus.CANCELLING)
FINAL_STATUSES = (RunStatus.CANCELLED, RunStatus.FAILED, RunStatus.SUCCEEDED)


class RunSplit(models.TextChoices):
    TRAIN = "train", "Train split"
    EVAL = "eval", "Eval split"
    ALL = "all", "Whole set"


class Run(models.Model):
    # The engine's run id: carried by every event, the Ray job's submission id and the ingest URL.
    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=10, choices=RunKind.choices)
    status = models.CharField(max_length=12, choices=RunStatus.choices, default=RunStatus.QUEUED)
    status_reason = models.TextField(blank=True, help_text="Why it failed or was cancelled.")
    # Null only for a single task version's validation run (VersionValidation).
    task_set = models.ForeignKey(
        TaskSet, on_delete=models.PROTECT, related_name="runs", null=True, blank=True
    )
    split = models.CharField(max_length=5, choices=RunSplit.choices, default=RunSplit.EVAL)
    spec = models.JSONField(help_text="The RunSpec as launched (task folders filled in at dispatch).")
    launched_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="runs")
    cloned_from = models.ForeignKey("self", on_delete=models.SET_NULL, null=True, blank=True)
    engine_version = models.CharField(max_length=40, blank=True)
    ray_address = models.CharField(max_length=300, blank=True)
    ray_job_id = models.CharField(max_length=100, blank=True)

    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    # An admin launched a training run past a failed health gate: who, and why (docs/quality.md).
    gate_overridden_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    gate_override_reason = models.TextField(blank=True)
    # The reconciler's memory: since when Ray has not had the run, and how often dispatch was re-sent.
    lost_since = models.DateTimeField(null=True, blank=True)
    dispatch_requeues = models.PositiveSmallIntegerField(default=0)
    last_requeued_at = models.DateTimeField(null=True, blank=True)
    last_event_at = models.DateTimeField(null=True, blank=True)

    # Progress and the latest figures, kept by ingestion so the run list never aggregates.
    steps_total = models.PositiveIntegerField(default=0)
    steps_done = models.PositiveIntegerField(default=0)
    rollouts_expected = models.PositiveIntegerField(default=0)
    rollouts_done = models.PositiveIntegerField(default=0)
    events_received = models.PositiveIntegerField(default=0)
    last_seq = models.PositiveBigIntegerField(default=0, help_text="Highest event seq stored.")
    latest_reward = models.FloatField(null=True, blank=True)
    latest_pass_at_1 = models.FloatField(null=True, blank=True)
    harness_error_rate = models.FloatField(null=True, blank=True)
    harness_errors = models.PositiveIntegerField(
        default=0, help_text="Final rollouts that ended in a harness error (the rate's numerator)."
    )
    events_rejected = models.PositiveIntegerField(default=0)
    ingest_rejections = models.JSONField(
        default=list,
        blank=True,
        help_text="The latest rejected events: {seq, type, reason, at}, newest last.",
    )

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["status", "-created_at"]),
            models.Index(fields=["launched_by", "-created_at"]),
            models.Index(fields=["kind", "-created_at"]),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.get_kind_display().lower()}, {self.status})"

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE_STATUSES

    @property
    def progress(self) -> float:
        """Fraction done, 0..1: steps for training, rollouts for the others."""
        if self.kind == RunKind.TRAIN and self.steps_total:
            return min(1.0, self.steps_done / self.steps_total)
        if self.rollouts_expected:
            return min(1.0, self.rollouts_done / self.rollouts_expected)
        return 1.0 if self.status == RunStatus.SUCCEEDED else 0.0


class RunTaskVersion(models.Model):
    """The exact task versions a run used (by content hash), so a run can always say what it ran."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="task_versions")
    version = models.ForeignKey(TaskVersion, on_delete=models.PROTECT, related_name="run_uses")
    split = models.CharField(max_length=5)
    content_hash = models.CharField(max_length=64)
    bundle_name = models.CharField(max_length=200, help_text="The bundle name the engine reports.")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "version"], name="unique_run_version")]
        indexes = [models.Index(fields=["run", "content_hash"])]

    def __str__(self) -> str:
        return f"{self.bundle_name} ({self.content_hash[:12]}) in run {self.run_id}"


class RunEvent(models.Model):
    """Every event once per (run, seq). Rollout bodies are not repeated here: they live in Rollout."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events")
    seq = models.PositiveBigIntegerField()
    type = models.CharField(max_length=20)
    payload = models.JSONField(default=dict)
    emitted_at = models.DateTimeField()
    received_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="unique_run_event_seq")]
        indexes = [models.Index(fields=["run", "type", "seq"])]

    def __str__(self) -> str:
        return f"{self.type} #{self.seq} of run {self.run_id}"


class MetricSplit(models.TextChoices):
    TRAIN = "train", "Training step"
    EVAL = "eval", "Evaluation"


class StepMetric(models.Model):
    """One step's metrics (train) or one evaluation's (eval, at the step it ran after)."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="step_metrics")
    split = models.CharField(max_length=5, choices=MetricSplit.choices, default=MetricSplit.TRAIN)
    step = models.PositiveIntegerField()
    metrics = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "split", "step"]
        constraints = [models.UniqueConstraint(fields=["run", "split", "step"], name="unique_run_split_step")]

    def __str__(self) -> str:
        return f"{self.split} step {self.step} of run {self.run_id}"


class Rollout(models.Model):
    """The summary row of one rollout attempt: every filterable field is an indexed column."""

    # Not indexed alone: every (run, ...) index below serves `run = X`, and (run, id) its newest first.
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="rollouts", db_index=False)
    seq = models.PositiveBigIntegerField(help_text="The event that carried it.")
    split = models.CharField(max_length=5, default=MetricSplit.TRAIN)
    step = models.PositiveIntegerField(default=0)
    task_version = models.ForeignKey(
        TaskVersion, on_delete=models.PROTECT, null=True, blank=True, related_name="rollouts"
    )
    task_name = models.CharField(max_length=200)
    task_hash = models.CharField(max_length=64)
    sample = models.PositiveIntegerField(default=0)
    attempt = models.PositiveIntegerField(default=1)
    # The attempt that counts for its (step, task, sample): not a harness error that was retried.
    final = models.BooleanField(default=True)
    outcome = models.CharField(max_length=20)
    error_code = models.CharField(max_length=40, blank=True)
    message = models.TextField(blank=True)
    reward = models.FloatField(null=True, blank=True)
    passed = models.BooleanField(null=True, blank=True)
    score = models.FloatField(null=True, blank=True)
    turns = models.PositiveIntegerField(default=0)
    tokens = models.PositiveIntegerField(default=0)
    duration_sec = models.FloatField(default=0.0)
    timings = models.JSONField(default=dict)
    policy = models.CharField(max_length=200, blank=True)
    label = models.CharField(
        max_length=20, blank=True, help_text="The current reviewer label (RolloutLabel)."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "seq"]
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="unique_rollout_seq")]
        indexes = [
            models.Index(fields=["run", "id"]),
            models.Index(fields=["run", "step"]),
            models.Index(fields=["run", "final", "step"]),
            models.Index(fields=["run", "outcome", "step"]),
            models.Index(fields=["run", "error_code"]),
            models.Index(fields=["run", "task_version"]),
            models.Index(fields=["task_version", "run"]),
            models.Index(fields=["run", "passed"]),
            models.Index(fields=["run", "reward"]),
            models.Index(fields=["run", "label"]),
            models.Index(fields=["outcome", "error_code", "-created_at"]),
            models.Index(fields=["label", "-created_at"]),
        ]

    def __str__(self) -> str:
        return f"{self.task_name} step {self.step} sample {self.sample} ({self.outcome})"


class RolloutBody(models.Model):
    """The transcript and verdicts of a rollout, loaded on demand; `turns` is a list read per index."""

    rollout = models.OneToOneField(Rollout, on_delete=models.CASCADE, primary_key=True, related_name="body")
    turns = models.JSONField(default=list)
    verdicts = models.JSONField(default=list)
    # None means the agent gave no final answer, which is not the same as an empty one.
    final_answer = models.TextField(null=True, blank=True)  # noqa: DJ001
    output_files = models.JSONField(default=list)
    error_detail = models.TextField(blank=True)

    def __str__(self) -> str:
        return f"body of rollout {self.rollout_id}"


class RolloutSearchText(models.Model):
    """What the trace list's text search matches (runs/search_text.py); trigram-indexed on PostgreSQL.

    Written by a Celery task after the rollout's batch commits (runs/services/search_index.py), so
    ingestion neither builds it nor pays for its index: a rollout is searchable seconds after it is
    listed."""

    rollout = models.OneToOneField(Rollout, on_delete=models.CASCADE, primary_key=True, related_name="search")
    text = models.TextField(blank=True)

    def __str__(self) -> str:
        return f"search text of rollout {self.rollout_id}"


class RunTaskStepTally(models.Model):
    """Counts over a run's final rollouts per (split, task, step), kept by ingestion under the run's lock.

    The run page's per-task table and the comparison's per-task diff sum these rows instead of
    grouping every rollout: a 1,000-step run of 200,000 rollouts has ~25,000 of them. Rollout rows
    never change their counted fields once stored, so the tallies only ever grow."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="task_tallies")
    split = models.CharField(max_length=10, choices=MetricSplit.choices)
    task_name = models.CharField(max_length=200)
    step = models.PositiveIntegerField()
    task_version = models.ForeignKey(
        TaskVersion, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    rollouts = models.PositiveIntegerField(default=0)
    valid = models.PositiveIntegerField(default=0)
    passed = models.PositiveIntegerField(default=0)
    harness_errors = models.PositiveIntegerField(default=0)
    agent_errors = models.PositiveIntegerField(default=0)
    # Over the rollouts with a reward: harness errors and cancellations have none, never averaged as 0.
    reward_sum = models.FloatField(default=0.0)
    rewarded = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["run", "split", "task_name", "step"], name="unique_task_step_tally"
            )
        ]

    def __str__(self) -> str:
        return f"{self.task_name} step {self.step} of run {self.run_id}"


class Checkpoint(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="checkpoints")
    step = models.PositiveIntegerField()
    path = models.CharField(max_length=500)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["run", "step"]
        constraints = [models.UniqueConstraint(fields=["run", "step"], name="unique_run_checkpoint")]

    def __str__(self) -> str:
        return f"checkpoint at step {self.step} of run {self.run_id}"


class LabelKind(models.TextChoices):
    GOOD = "good", "Good"
    GRADER_WRONG = "grader_wrong", "Grader wrong"
    HARNESS_BUG = "harness_bug", "Harness bug"
    TASK_AMBIGUOUS = "task_ambiguous", "Task ambiguous"
    REWARD_HACKING = "reward_hacking", "Reward hacking"


class RolloutLabel(models.Model):
    """A reviewer's verdict on a trace. Append-only: a change adds a row, so the history stays;
    the rollout's current label is copied into `Rollout.label` for filtering."""

    rollout = models.ForeignKey(Rollout, on_delete=models.CASCADE, related_name="labels")
    label = models.CharField(
        max_length=20, choices=LabelKind.choices, blank=True, help_text="Blank: cleared."
    )
    note = models.TextField(blank=True)
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="rollout_labels"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["rollout", "-created_at", "-pk"]
        indexes = [models.Index(fields=["rollout", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.label or 'cleared'} on rollout {self.rollout_id}"


class TraceExportFormat(models.TextChoices):
    ROLLOUTS_JSONL = "jsonl", "Rollouts (JSONL)"
    ATIF = "atif", "ATIF trajectories (JSONL)"
    METRICS_CSV = "metrics_csv", "Step metrics (CSV)"


def trace_export_upload_to(job: TraceExport, filename: str) -> str:
    return f"trace-exports/{job.owner_id}/{job.pk}/{filename}"


class TraceExport(ExportProgress):
    """An export of a filtered rollout list (or a run's metrics), written by a Celery worker with progress."""

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="trace_exports"
    )
    format = models.CharField(max_length=12, choices=TraceExportFormat.choices)
    filters = models.JSONField(default=dict, help_text="The rollout-list filters, as in the URL.")
    label = models.CharField(max_length=300, help_text="What is exported, in words.")
    file = models.FileField(upload_to=trace_export_upload_to, max_length=300, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["owner", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.get_format_display()} export ({self.status})"


class ValidationStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    PASSED = "passed", "Passed"
    FAILED = "failed", "Failed"
    ERROR = "error", "Could not run"


class VersionValidation(models.Model):
    """One validation of one task version (on submit for review, or on demand): a checklist whose
    items each say ok or why not, backed by a validate run whose rollouts are the evidence."""

    version = models.ForeignKey(TaskVersion, on_delete=models.CASCADE, related_name="validations")
    run = models.OneToOneField(
        Run, on_delete=models.SET_NULL, null=True, blank=True, related_name="validation"
    )
    status = models.CharField(
        max_length=10, choices=ValidationStatus.choices, default=ValidationStatus.PENDING
    )
    trigger = models.CharField(max_length=10, help_text="submit or manual")
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    # [{"key", "label", "ok", "reason", "rollout_id"}], in the order the checklist shows them.
    checks = models.JSONField(default=list, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    overridden_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    override_reason = models.TextField(blank=True)
    overridden_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["version", "-created_at", "-pk"]
        indexes = [models.Index(fields=["version", "-created_at"])]

    def __str__(self) -> str:
        return f"validation of {self.version} ({self.status})"


class CriterionReview(models.Model):
    """A reviewer confirms or overturns the grader's verdict on one criterion of one rollout.
    Append-only; the latest row per (rollout, criterion, reviewer) counts."""

    rollout = models.ForeignKey(Rollout, on_delete=models.CASCADE, related_name="criterion_reviews")
    criterion_id = models.CharField(max_length=100)
    criterion_kind = models.CharField(max_length=30)
    judge_model = models.CharField(max_length=200, blank=True, help_text="For llm_judge criteria.")
    grader_met = models.BooleanField()
    reviewer_met = models.BooleanField()
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    note = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["rollout", "criterion_id", "-created_at", "-pk"]
        indexes = [
            models.Index(fields=["rollout", "criterion_id", "-created_at"]),
            models.Index(fields=["criterion_kind", "judge_model"]),
        ]

    def __str__(self) -> str:
        verdict = "confirmed" if self.grader_met == self.reviewer_met else "overturned"
        return f"{self.criterion_id} {verdict} on rollout {self.rollout_id}"


class DifficultyBand(models.TextChoices):
    TOO_EASY = "too_easy", "Too easy (all pass)"
    EASY = "easy", "Easy"
    MEDIUM = "medium", "Medium"
    HARD = "hard", "Hard"
    TOO_HARD = "too_hard", "Too hard (none pass)"


class TaskDifficulty(models.Model):
    """A task's measured difficulty, from the pass rate of a chosen reference run (filterable)."""

    task = models.OneToOneField(
        "tasks_authoring.Task", on_delete=models.CASCADE, related_name="measured_difficulty"
    )
    band = models.CharField(max_length=10, choices=DifficultyBand.choices)
    pass_rate = models.FloatField()
    samples = models.PositiveIntegerField()
    reference_run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="+")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [models.Index(fields=["band"])]

    def __str__(self) -> str:
        return f"{self.task} is {self.band} ({self.pass_rate:.0%})"
