from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from webapp.health import run_health_checks
from webapp.roles import Role, require_role, roles_of


@login_required
def home(request: HttpRequest) -> HttpResponse:
    return render(request, "webapp/home.html", {"roles": sorted(roles_of(request.user))})


@require_GET
@never_cache
def healthz(request: HttpRequest) -> JsonResponse:
    results = run_health_checks()
    ok = all(result.ok for result in results)
    body = {"ok": ok, "checks": {result.name: result.as_dict() for result in results}}
    return JsonResponse(body, status=200 if ok else 503)


@login_required
@never_cache
def health(request: HttpRequest) -> HttpResponse:
    require_role(request, Role.ADMIN)
    results = run_health_checks()
    context = {"results": results, "all_ok": all(result.ok for result in results)}
    if request.htmx:
        return render(request, "webapp/health.html#checks", context)
    return render(request, "webapp/health.html", context)
