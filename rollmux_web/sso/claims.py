"""The rule that maps an identity provider's claims to a RollMux user: pure functions.

Defaults fit the common IdP shape (Keycloak, Entra ID, Okta, Dex send a `groups` claim):
a group `rollmux-tenant-<name>` makes the user a member of tenant <name>; the group
`rollmux-admins` makes them an admin and `rollmux-finance` finance; anyone else is a
researcher, who needs at least one tenant. Every part is a setting (docs/operations.md, "SSO setup").
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

ROLE_ORDER = ("admin", "finance", "researcher")  # the first role a user's groups give wins


@dataclass(frozen=True)
class ClaimRule:
    username_claim: str = "preferred_username"
    tenants_claim: str = "groups"
    tenant_pattern: str = r"^rollmux-tenant-(?P<tenant>[a-z0-9][a-z0-9_-]*)$"
    role_claim: str = "groups"
    roles: tuple[tuple[str, str], ...] = (
        ("rollmux-admins", "admin"),
        ("rollmux-finance", "finance"),
    )


@dataclass(frozen=True)
class Identity:
    username: str
    email: str
    role: str
    tenants: tuple[str, ...]
    refusal: str = ""  # why this identity may not log in ("" when it may)


def parse_roles(text: str) -> tuple[tuple[str, str], ...]:
    """Parse "group=role,group=role" (roles: admin, finance, researcher); ValueError names
    the bad entry."""
    out = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        value, sep, role = part.partition("=")
        if not sep or not value.strip() or role.strip() not in ROLE_ORDER:
            raise ValueError(f"{part!r}: use claim-value=admin|finance|researcher")
        out.append((value.strip(), role.strip()))
    return tuple(out)


def _values(claims: Mapping[str, Any], name: str) -> list[str]:
    raw = claims.get(name)
    if raw is None:
        return []
    if isinstance(raw, str):
        return [v for v in re.split(r"[\s,]+", raw) if v]
    if isinstance(raw, Iterable):
        return [str(v) for v in raw]
    return [str(raw)]


def map_claims(
    claims: Mapping[str, Any], rule: ClaimRule, known_tenants: Iterable[str]
) -> Identity:
    """Return the RollMux identity the claims describe, or one with a `refusal`.

    Tenants are those the claim names that exist here (an unknown name is ignored, never
    created: tenants, quotas and budgets are an admin's to make).
    """
    username = str(claims.get(rule.username_claim) or "").strip()
    email = str(claims.get("email") or "").strip()
    pattern = re.compile(rule.tenant_pattern)
    known = set(known_tenants)
    named = []
    for value in _values(claims, rule.tenants_claim):
        match = pattern.match(value)
        if match:
            named.append(match.groupdict().get("tenant") or match.group(0))
    tenants = tuple(sorted({t for t in named if t in known}))
    given = {role for value, role in rule.roles if value in _values(claims, rule.role_claim)}
    role = next((r for r in ROLE_ORDER if r in given), "researcher")
    refusal = ""
    if not username or len(username) > 150:
        refusal = f"the identity provider sent no usable {rule.username_claim!r} claim"
    elif role == "researcher" and not tenants:
        refusal = (
            f"your {rule.tenants_claim!r} claim names no RollMux tenant"
            + (f" (unknown here: {', '.join(sorted(set(named) - known))})" if named else "")
            + "; ask an admin to add you to one"
        )
    return Identity(username=username, email=email, role=role, tenants=tenants, refusal=refusal)
