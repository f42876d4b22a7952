"""The researcher's pages: run list, launch form, live run page, rollout page, compare."""

from runs.views.compare import run_compare
from runs.views.launch import run_new, run_new_preview
from runs.views.lists import run_list
from runs.views.pages import rollout_detail, run_cancel, run_detail, run_driver_logs

__all__ = [
    "rollout_detail",
    "run_cancel",
    "run_compare",
    "run_detail",
    "run_driver_logs",
    "run_list",
    "run_new",
    "run_new_preview",
]
