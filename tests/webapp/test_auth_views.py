import pytest
from django.urls import reverse

PASSWORD = "correct horse battery"
pytestmark = pytest.mark.django_db


def test_an_anonymous_user_is_sent_to_login(client, db):
    response = client.get(reverse("home"))
    assert response.status_code == 302
    assert response["Location"] == f"{reverse('login')}?next=/"


def test_it_logs_in_and_shows_the_shell(client, expert):
    response = client.post(reverse("login"), {"username": expert.username, "password": PASSWORD}, follow=True)
    assert response.redirect_chain[-1][0] == reverse("home")
    body = response.content.decode()
    assert "Welcome, erin_expert" in body
    assert 'hx-headers=\'{"X-CSRFToken": "' in body
    assert "/static/django_htmx/htmx-2.min.js" in body


def test_a_failed_login_says_what_went_wrong(client, expert):
    response = client.post(reverse("login"), {"username": expert.username, "password": "wrong"})
    assert response.status_code == 200
    assert "That username and password do not match an account" in response.content.decode()
    assert "_auth_user_id" not in client.session


def test_logout_ends_the_session(client, expert):
    client.force_login(expert)
    response = client.post(reverse("logout"))
    assert response.status_code == 302
    assert client.get(reverse("home")).status_code == 302


@pytest.mark.parametrize(
    ("persona", "sees", "does_not_see"),
    [
        ("expert", {'data-role="expert"'}, {'data-role="researcher"', 'data-role="reviewer"', ">Health<"}),
        (
            "researcher",
            {'data-role="researcher"'},
            {'data-role="expert"', 'data-role="reviewer"', ">Health<"},
        ),
        ("reviewer", {'data-role="reviewer"'}, {'data-role="expert"', 'data-role="researcher"', ">Health<"}),
        (
            "admin_user",
            {'data-role="expert"', 'data-role="researcher"', 'data-role="reviewer"', ">Health<", ">Admin<"},
            set(),
        ),
        ("outsider", {"No role yet"}, {'data-role="expert"', ">Health<"}),
    ],
)
def test_each_persona_sees_the_navigation_of_its_role(client, request, persona, sees, does_not_see):
    client.force_login(request.getfixturevalue(persona))
    body = client.get(reverse("home")).content.decode()
    for fragment in sees:
        assert fragment in body
    for fragment in does_not_see:
        assert fragment not in body
