"""Forms of the quality pages: the signal overview's choice of task set and run (from the URL), a
reviewer's verdict on one criterion's grading, the name of a task set without zero-signal tasks."""

from __future__ import annotations

from django import forms

from .services.labels import MAX_NOTE_CHARS


class SignalFilterForm(forms.Form):
    """`task_set` and `run` ids; a bad value is dropped (the page then shows the overview)."""

    task_set = forms.IntegerField(required=False, min_value=1)
    run = forms.IntegerField(required=False, min_value=1)

    def ids(self) -> tuple[int | None, int | None]:
        self.is_valid()
        cleaned = getattr(self, "cleaned_data", {})
        return cleaned.get("task_set"), cleaned.get("run")


class CriterionReviewForm(forms.Form):
    reviewer_met = forms.TypedChoiceField(
        choices=[("yes", "Met"), ("no", "Not met")],
        coerce=lambda value: value == "yes",
        label="The criterion is",
    )
    note = forms.CharField(required=False, max_length=MAX_NOTE_CHARS, widget=forms.TextInput)


class ZeroSignalTaskSetForm(forms.Form):
    name = forms.CharField(max_length=200)
