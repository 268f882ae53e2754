"""A real OpenID Connect provider for the SSO test: a second Django project running
django-oidc-provider (maintained, the de facto OP for Django), started on loopback by
tests/web/test_sso.py. Nothing here is part of RollMux."""
