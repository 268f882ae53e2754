"""Single sign-on by OpenID Connect (mozilla-django-oidc): users map to a role and tenants
from their ID-token / userinfo claims by a configurable rule (claims.py); local password
login stays as a break-glass for admins and can be closed to everyone else
(ROLLMUX_PASSWORD_LOGIN=admins)."""
