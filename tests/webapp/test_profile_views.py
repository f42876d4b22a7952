"""The profile page: personal API tokens are created (shown once), listed, used and revoked."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from webapp.models import ApiToken

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def test_an_anonymous_visitor_is_sent_to_login(client):
    assert client.get(reverse("profile")).status_code == 302
    assert client.post(reverse("api_token_new"), {"name": "x"}).status_code == 302


def test_the_nav_links_to_the_profile_and_it_shows_my_roles(client, researcher):
    client.force_login(researcher)
    home = client.get(reverse("home")).content.decode()
    assert f'href="{reverse("profile")}"' in home
    page = client.get(reverse("profile")).content.decode()
    assert "Profile and API tokens" in page and "role-researcher" in page
    assert "No tokens yet" in page and reverse("api:openapi-view") in page


def test_a_new_token_is_shown_once_and_only_its_hash_is_kept(client, researcher):
    client.force_login(researcher)
    response = client.post(reverse("api_token_new"), {"name": "nightly export"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    body = response.content.decode()
    assert "<html" not in body and 'id="api-tokens"' in body  # the htmx partial only
    token = ApiToken.objects.get(user=researcher)
    raw = body.split('readonly value="')[1].split('"')[0]
    assert raw.startswith("prc_") and raw.startswith(token.prefix) and raw not in token.token_hash
    assert token.name == "nightly export" and "shown only this once" in body

    again = client.get(reverse("profile")).content.decode()
    assert raw not in again and f"{token.prefix}…" in again

    api = Client(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert api.get("/api/runs").status_code == 200
    token.refresh_from_db()
    assert token.last_used_at is not None
    assert "ago" in client.get(reverse("profile")).content.decode()


def test_a_token_needs_a_name(client, researcher):
    client.force_login(researcher)
    response = client.post(reverse("api_token_new"), {"name": "  "})
    assert response.status_code == 400
    assert "give the token a name" in response.content.decode()
    assert not ApiToken.objects.exists()


def test_revoking_a_token_stops_it_working(client, researcher):
    client.force_login(researcher)
    body = client.post(reverse("api_token_new"), {"name": "laptop"}).content.decode()
    raw = body.split('readonly value="')[1].split('"')[0]
    token = ApiToken.objects.get(user=researcher)
    response = client.post(reverse("api_token_revoke", args=[token.pk]))
    assert response.status_code == 302 and response["Location"] == reverse("profile")
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert "revoked" in client.get(reverse("profile")).content.decode()
    assert Client(HTTP_AUTHORIZATION=f"Bearer {raw}").get("/api/runs").status_code == 401


def test_nobody_revokes_or_sees_another_users_token(client, researcher, reviewer):
    client.force_login(researcher)
    client.post(reverse("api_token_new"), {"name": "mine"})
    token = ApiToken.objects.get(user=researcher)
    client.force_login(reviewer)
    assert "mine" not in client.get(reverse("profile")).content.decode()
    assert client.post(reverse("api_token_revoke", args=[token.pk])).status_code == 404
    token.refresh_from_db()
    assert token.revoked_at is None


def test_revoking_needs_a_post(client, researcher):
    client.force_login(researcher)
    client.post(reverse("api_token_new"), {"name": "mine"})
    token = ApiToken.objects.get(user=researcher)
    assert client.get(reverse("api_token_revoke", args=[token.pk])).status_code == 405
