import pytest


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """Personas are made per test; the default hasher would spend most of the suite's time on them."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
