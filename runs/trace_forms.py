"""The trace list's filters, read from the URL by a Form: typed and clamped, a bad value dropped and named.

`RolloutFilterForm(request.GET).filters()` is the dict `runs.trace_selectors.rollouts_filtered` takes
(only the filters that are set); `.sort_key()` and `.cursor()` drive the keyset page. The same dict is
stored on a TraceExport and echoed back into URLs by `filters_query`, so a list, the trace viewer's
prev / next and an export all see exactly the same rollouts.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django import forms

from rl_engine.outcomes import AgentErrorCode, HarnessCode, Outcome

from .models import LabelKind, MetricSplit
from .trace_selectors import MIN_SEARCH_CHARS, SORTS, Cursor

YES_NO = [("", "Any"), ("yes", "Yes"), ("no", "No")]
LABEL_CHOICES = [("", "Any label"), ("none", "Unlabelled"), ("any", "Labelled"), *LabelKind.choices]
ERROR_CODES = [(code.value, code.value) for code in (*HarnessCode, *AgentErrorCode)]
SORT_LABELS = {
    "-id": "Newest first",
    "id": "Oldest first",
    "step": "Step, first to last",
    "-step": "Step, last to first",
    "-reward": "Reward, highest first",
    "reward": "Reward, lowest first",
    "-turns": "Most turns",
    "-tokens": "Most tokens",
    "-duration": "Longest",
}
assert set(SORT_LABELS) == set(SORTS)
# The keys of the filters dict, in the order they are written back into URLs.
FILTER_KEYS = (
    "run",
    "task",
    "version",
    "step_min",
    "step_max",
    "sample",
    "split",
    "outcome",
    "error_code",
    "reward_min",
    "reward_max",
    "passed",
    "final",
    "label",
    "q",
)


class RolloutFilterForm(forms.Form):
    run = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)
    task = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)
    version = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)
    step_min = forms.IntegerField(required=False, min_value=0, max_value=2**31 - 1, label="Steps from")
    step_max = forms.IntegerField(required=False, min_value=0, max_value=2**31 - 1, label="to")
    sample = forms.IntegerField(required=False, min_value=0, max_value=2**31 - 1)
    split = forms.ChoiceField(required=False, choices=[("", "Any split"), *MetricSplit.choices])
    outcome = forms.ChoiceField(
        required=False, choices=[("", "Any outcome"), *((o.value, o.value) for o in Outcome)]
    )
    error_code = forms.ChoiceField(required=False, choices=[("", "Any code"), *ERROR_CODES], label="Code")
    reward_min = forms.FloatField(required=False, label="Reward from")
    reward_max = forms.FloatField(required=False, label="to")
    passed = forms.ChoiceField(required=False, choices=YES_NO)
    final = forms.ChoiceField(
        required=False,
        choices=[("", "Every attempt"), ("yes", "Final attempts"), ("no", "Retried attempts")],
        label="Attempts",
    )
    label = forms.ChoiceField(required=False, choices=LABEL_CHOICES)
    q = forms.CharField(required=False, max_length=200, strip=True, label="Text in messages")
    sort = forms.ChoiceField(required=False, choices=list(SORT_LABELS.items()))
    after = forms.CharField(required=False, max_length=100, widget=forms.HiddenInput)
    before = forms.CharField(required=False, max_length=100, widget=forms.HiddenInput)

    def clean_q(self) -> str:
        q = self.cleaned_data["q"]
        if q and max(len(word) for word in q.split()) < MIN_SEARCH_CHARS:
            raise forms.ValidationError(f"Search for at least {MIN_SEARCH_CHARS} characters (in one word).")
        return q

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        for low, high in (("step_min", "step_max"), ("reward_min", "reward_max")):
            if (
                cleaned.get(low) is not None
                and cleaned.get(high) is not None
                and cleaned[low] > cleaned[high]
            ):
                self.add_error(high, "The upper bound is below the lower one.")
        return cleaned

    def _cleaned(self) -> dict[str, Any]:
        self.is_valid()
        return getattr(self, "cleaned_data", {})

    def filters(self) -> dict[str, Any]:
        """The filters that are set and valid; a field that did not validate is dropped (and shows its error)."""
        cleaned = self._cleaned()
        filters = {}
        for key in FILTER_KEYS:
            value = cleaned.get(key)
            if value is None or value == "":
                continue
            if key in ("passed", "final"):
                value = value == "yes"
            filters[key] = value
        return filters

    def sort_key(self) -> str:
        return self._cleaned().get("sort") or "-id"

    def cursor(self) -> tuple[str, Cursor | None]:
        """("after" | "before", the cursor) of the page asked for; ("after", None) is the first page."""
        cleaned = self._cleaned()
        for direction in ("before", "after"):
            cursor = Cursor.parse(cleaned.get(direction) or "")
            if cursor is not None:
                return direction, cursor
        return "after", None


def filters_query(filters: dict[str, Any], *, sort: str = "-id", **extra: Any) -> str:
    """The URL query string of `filters` (as `RolloutFilterForm.filters()` returns them), sort and extras."""
    pairs = []
    for key in FILTER_KEYS:
        if key not in filters:
            continue
        value = filters[key]
        pairs.append((key, ("yes" if value else "no") if isinstance(value, bool) else value))
    if sort and sort != "-id":
        pairs.append(("sort", sort))
    pairs += [(key, value) for key, value in extra.items() if value not in (None, "")]
    return urlencode(pairs)


class LabelForm(forms.Form):
    label = forms.ChoiceField(required=False, choices=[("", "No label (clear)"), *LabelKind.choices])
    note = forms.CharField(required=False, max_length=4000, widget=forms.Textarea(attrs={"rows": 2}))


HARNESS_WINDOWS = [("1", "Last 24 hours"), ("7", "Last 7 days"), ("30", "Last 30 days"), ("0", "All time")]


class HarnessWindowForm(forms.Form):
    days = forms.ChoiceField(required=False, choices=HARNESS_WINDOWS, label="Window")

    def window_days(self) -> int:
        """Days back from now; 0 means all time. Anything else falls back to 30."""
        self.is_valid()
        return int(getattr(self, "cleaned_data", {}).get("days") or 30)
