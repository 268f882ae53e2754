from __future__ import annotations

from rest_framework import serializers

from rollmux_web.accounts.models import Tenant


class LoginSerializer(serializers.Serializer):
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(max_length=256, trim_whitespace=False, write_only=True)
    name = serializers.CharField(max_length=64, required=False, default="cli")


class UserSummarySerializer(serializers.Serializer):
    id = serializers.IntegerField()
    username = serializers.CharField()
    role = serializers.CharField(allow_null=True)
    tenants = serializers.ListField(child=serializers.CharField())
    visible_tenants = serializers.ListField(child=serializers.CharField())
    can_submit = serializers.BooleanField()
    is_admin = serializers.BooleanField()


class TokenResponseSerializer(serializers.Serializer):
    token = serializers.CharField(help_text="shown once; send as 'Authorization: Bearer <token>'")
    expires_at = serializers.DateTimeField(
        allow_null=True, help_text="when the token stops working (null: never)"
    )
    user = UserSummarySerializer()


class TenantSerializer(serializers.ModelSerializer):
    class Meta:
        model = Tenant
        fields = ["id", "name", "display_name", "created_at"]
        read_only_fields = fields
