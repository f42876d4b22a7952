from django import template
from django.utils.safestring import mark_safe

from tasks_authoring.rendering import render_markdown

register = template.Library()


@register.filter
def markdown(text: str) -> str:
    return mark_safe(render_markdown(text))  # nh3 has sanitised it


@register.filter
def get_item(mapping: dict, key):
    return mapping.get(key) if mapping else None


@register.filter
def first_columns(row: list, count: int) -> list:
    """The cells of a preview row up to the sheet's real width (the reader pads rows to its own limit)."""
    return row[: int(count or 0)]


@register.filter
def column_letters(count: int) -> list[str]:
    from openpyxl.utils import get_column_letter

    return [get_column_letter(index) for index in range(1, int(count or 0) + 1)]
