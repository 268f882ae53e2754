"""The claims the test provider gives: username, email and the user's groups."""

from typing import Any

from oidc_provider.lib.claims import ScopeClaims


def userinfo(claims: dict[str, Any], user: Any) -> dict[str, Any]:
    claims["preferred_username"] = user.username
    claims["email"] = user.email
    claims["name"] = user.get_full_name() or user.username
    return claims


class GroupsClaims(ScopeClaims):
    """Scope `groups`: the user's Django groups by name (how IdPs like Keycloak send them)."""

    def scope_groups(self) -> dict[str, Any]:
        return {"groups": sorted(self.user.groups.values_list("name", flat=True))}
