"""The REST API's root, mounted at /api/: OpenAPI schema at /api/openapi.json, docs at /api/docs.

Callers authenticate with their browser session (unsafe methods then need the CSRF token, as
forms do) or with `Authorization: Bearer <personal token>` from the profile page. The browser and
the API call the same services and selectors, so they refuse the same things the same way: what a
user may not read answers 404, what they may read but not change answers 403.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from ninja import NinjaAPI
from ninja.security import HttpBearer, SessionAuth

from runs.api import router as runs_router
from runs.api_quality import router as quality_router
from runs.api_traces import router as traces_router
from webapp.api_tokens import api_token_user


class PersonalToken(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str):
        user = api_token_user(token)
        if user is not None:
            request.user = user  # selectors and services read request.user, as in the views
        return user


api = NinjaAPI(
    title="Practicum API",
    version="1",
    description=(
        "Task sets, runs (launch, cancel, metrics), rollouts and traces, environment quality (criterion "
        "reviews, grader health, task-version validation), and event ingestion."
    ),
    auth=[PersonalToken(), SessionAuth()],
    urls_namespace="api",
)


@api.exception_handler(PermissionDenied)
def _forbidden(request: HttpRequest, exc: PermissionDenied):
    return api.create_response(request, {"detail": str(exc) or "not allowed"}, status=403)


api.add_router("", runs_router)
api.add_router("", traces_router)
api.add_router("", quality_router)
