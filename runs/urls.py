from django.urls import path

from runs import views
from runs.views import health_gate, quality, trace_exports, traces, validation

app_name = "runs"

urlpatterns = [
    path("runs/", views.run_list, name="run_list"),
    path("runs/new/", views.run_new, name="run_new"),
    path("runs/new/preview/", views.run_new_preview, name="run_new_preview"),
    path("runs/compare/", views.run_compare, name="run_compare"),
    path("runs/<int:pk>/", views.run_detail, name="run_detail"),
    path("runs/<int:pk>/cancel/", views.run_cancel, name="run_cancel"),
    path("runs/<int:pk>/resume/", health_gate.run_resume, name="run_resume"),
    path("runs/<int:pk>/logs/", views.run_driver_logs, name="run_driver_logs"),
    path("runs/<int:pk>/rollouts/<int:rollout_id>/", views.rollout_detail, name="rollout_detail"),
    path("runs/<int:pk>/harness-errors/", traces.run_harness_errors, name="run_harness_errors"),
    path("traces/", traces.trace_list, name="trace_list"),
    path("traces/harness-errors/", traces.harness_errors, name="harness_errors"),
    path("traces/<int:rollout_id>/", traces.trace_detail, name="trace_detail"),
    path("traces/<int:rollout_id>/turns/", traces.trace_turns, name="trace_turns"),
    path("traces/<int:rollout_id>/label/", traces.trace_label, name="trace_label"),
    path("traces/exports/", trace_exports.trace_export_list, name="trace_exports"),
    path("traces/exports/new/", trace_exports.trace_export_new, name="trace_export_new"),
    path("traces/exports/<int:pk>/", trace_exports.trace_export_detail, name="trace_export"),
    path(
        "traces/exports/<int:pk>/download/", trace_exports.trace_export_download, name="trace_export_download"
    ),
    path("traces/task-set/", trace_exports.trace_task_set_new, name="trace_task_set_new"),
    path("tasks/<int:pk>/validate/", validation.version_validate, name="version_validate"),
    path("tasks/<int:pk>/validation/", validation.validation_card, name="validation_card"),
    path("validations/<int:pk>/override/", validation.validation_override, name="validation_override"),
    path(
        "traces/<int:rollout_id>/criteria/<str:criterion_id>/review/",
        quality.trace_criterion_review,
        name="trace_criterion_review",
    ),
    path("runs/<int:pk>/signal/", quality.run_signal, name="run_signal"),
    path("runs/<int:pk>/signal/task-set/", quality.run_signal_task_set, name="run_signal_task_set"),
    path("runs/<int:pk>/difficulty/", quality.run_difficulty_reference, name="run_difficulty_reference"),
    path("quality/", quality.quality_index, name="quality"),
    path("quality/grader/", quality.grader_health, name="grader_health"),
    path("quality/signal/", quality.signal_overview, name="signal"),
]
