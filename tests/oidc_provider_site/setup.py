"""Prepare the test provider's database: tables, a signing key, users with groups, and the
RollMux client. `python -m tests.oidc_provider_site.setup REDIRECT_URI CLIENT_ID SECRET`."""

import os
import sys

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.oidc_provider_site.settings")

import django  # noqa: E402

django.setup()

from django.contrib.auth.models import Group, User  # noqa: E402
from django.core.management import call_command  # noqa: E402
from oidc_provider.models import Client, ResponseType  # noqa: E402

USERS = {
    # username: (password, groups)
    "dora": ("idp-dora-pass", ["rollmux-tenant-vision", "unrelated-team"]),
    "fin": ("idp-fin-pass", ["rollmux-finance"]),
    "nobody": ("idp-nobody-pass", ["unrelated-team"]),
    "alice": ("idp-alice-pass", ["rollmux-tenant-vision"]),  # a local account's name
}


def main(redirect_uri: str, client_id: str, secret: str) -> None:
    call_command("migrate", verbosity=0)
    with open(os.devnull, "w") as quiet:
        call_command("creatersakey", stdout=quiet)
    for username, (password, groups) in USERS.items():
        user = User.objects.create_user(username, f"{username}@idp.example.internal", password)
        user.groups.set([Group.objects.get_or_create(name=g)[0] for g in groups])
    client = Client.objects.create(
        name="RollMux",
        client_type="confidential",
        client_id=client_id,
        client_secret=secret,
        jwt_alg="RS256",
        require_consent=False,
        reuse_consent=True,
        _redirect_uris=redirect_uri,
        _scope="openid email profile groups",
    )
    client.response_types.set(ResponseType.objects.filter(value="code"))


if __name__ == "__main__":
    main(*sys.argv[1:4])
