"""Number formatting for the runs pages: a missing figure shows as a dash, never as 0."""

from __future__ import annotations

from django import template

register = template.Library()


@register.filter
def fmt(value, digits: int = 3) -> str:
    if value is None:
        return "–"
    return f"{float(value):.{int(digits)}f}"


@register.filter
def pct(value) -> str:
    if value is None:
        return "–"
    return f"{float(value) * 100:.1f}%"


@register.filter
def percent_int(value) -> int:
    return round(float(value or 0) * 100)


@register.filter
def signed(value, digits: int = 3) -> str:
    if value is None:
        return "–"
    return f"{float(value):+.{int(digits)}f}"


@register.filter
def get_item(mapping, key):
    return mapping.get(key) if mapping else None
