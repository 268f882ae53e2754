"""Accounts API: exchange a password for a token, the caller's user, visible tenants."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import authenticate
from django.contrib.auth.signals import user_logged_in
from django.utils.decorators import method_decorator
from django.views.decorators.debug import sensitive_post_parameters
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import generics, status
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from rollmux_web.accounts.selectors import user_role, user_summary, visible_tenants
from rollmux_web.accounts.serializers import (
    LoginSerializer,
    TenantSerializer,
    TokenResponseSerializer,
    UserSummarySerializer,
)
from rollmux_web.accounts.services import token_create
from rollmux_web.api.permissions import HasRole
from rollmux_web.api.schema import ApiErrorSerializer, ErrorDocumentingAutoSchema


@method_decorator(sensitive_post_parameters("password"), name="dispatch")
class TokenObtainView(APIView):
    """POST username + password, get a new API token (what `rollmux login` calls).

    The token expires after ROLLMUX_TOKEN_TTL_DAYS; a user keeps at most
    ROLLMUX_CLI_TOKENS_PER_USER live tokens from logins (older ones are revoked). Repeated
    failures lock the username and the address out for a while (429, see docs/api.md).
    """

    # No session/CSRF here: the credentials in the body are the authentication.
    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]
    schema = ErrorDocumentingAutoSchema()

    @extend_schema(
        request=LoginSerializer,
        responses={
            201: TokenResponseSerializer,
            429: OpenApiResponse(
                ApiErrorSerializer,
                description="too many failed logins for this username or address, or too "
                "many requests from this address: Retry-After says when to try again",
            ),
        },
    )
    def post(self, request: Request) -> Response:
        data = LoginSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        user = authenticate(
            request._request,
            username=data.validated_data["username"],
            password=data.validated_data["password"],
        )
        # One message for unknown user, wrong password and users without a role, so the
        # endpoint does not reveal which usernames exist.
        if user is None or not user.is_active or user_role(user) is None:
            raise ValidationError({"non_field_errors": ["Invalid username or password."]})
        # a login like the form's: axes clears the username's failures, last_login is set
        user_logged_in.send(sender=user.__class__, request=request._request, user=user)
        # a key presented as a Bearer token (the CLI's previous one) is replaced, not kept
        scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
        token, key = token_create(
            user=user,
            name=data.validated_data["name"],
            via_login=True,
            replaces=presented.strip() if scheme.lower() == "bearer" else "",
        )
        return Response(
            {"token": key, "expires_at": token.expires_at, "user": user_summary(user)},
            status=status.HTTP_201_CREATED,
        )


class MeView(APIView):
    """The caller's user, role and tenants."""

    permission_classes = [HasRole]
    schema = ErrorDocumentingAutoSchema()

    @extend_schema(responses=UserSummarySerializer)
    def get(self, request: Request) -> Response:
        return Response(user_summary(request.user))


class TenantListView(generics.ListAPIView):
    """Tenants the caller may see (their own; all for admin and finance)."""

    permission_classes = [HasRole]
    schema = ErrorDocumentingAutoSchema()
    serializer_class = TenantSerializer

    def get_queryset(self) -> Any:
        return visible_tenants(self.request.user).order_by("name")


class TenantDetailView(generics.RetrieveAPIView):
    permission_classes = [HasRole]
    schema = ErrorDocumentingAutoSchema()
    serializer_class = TenantSerializer
    lookup_field = "name"

    def get_queryset(self) -> Any:
        return visible_tenants(self.request.user)

    def get_object(self) -> Any:
        # A NUL byte cannot be in a tenant name, and PostgreSQL refuses it in a lookup.
        if "\x00" in self.kwargs.get("name", ""):
            raise NotFound()
        return super().get_object()
