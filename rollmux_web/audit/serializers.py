from __future__ import annotations

from rest_framework import serializers

from rollmux_web.audit.models import AuditEntry


class AuditEntrySerializer(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor_name", read_only=True)

    class Meta:
        model = AuditEntry
        fields = [
            "id",
            "at",
            "actor",
            "action",
            "object_type",
            "object_id",
            "object_name",
            "tenant",
            "before",
            "after",
        ]
        read_only_fields = fields
