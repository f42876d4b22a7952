import pytest
from django.contrib.auth.models import AnonymousUser, Group
from django.http import Http404
from django.test import RequestFactory

from webapp.roles import Role, has_role, require_role, roles_of


def test_the_migration_creates_the_four_role_groups(db):
    assert set(Group.objects.values_list("name", flat=True)) >= {"expert", "researcher", "reviewer", "admin"}


def test_a_user_holds_the_roles_of_their_groups(expert):
    assert roles_of(expert) == {Role.EXPERT}
    assert has_role(expert, Role.EXPERT)
    assert not has_role(expert, Role.REVIEWER)


def test_an_admin_holds_every_role(admin_user):
    assert all(has_role(admin_user, role) for role in Role)


def test_an_anonymous_user_holds_none():
    assert roles_of(AnonymousUser()) == frozenset()


def test_require_role_hides_the_object_from_outsiders_with_404(outsider, reviewer):
    request = RequestFactory().get("/")
    request.user = outsider
    with pytest.raises(Http404):
        require_role(request, Role.REVIEWER)
    request.user = reviewer
    require_role(request, Role.REVIEWER)
