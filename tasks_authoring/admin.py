from django.contrib import admin

from .models import (
    Blob,
    Criterion,
    Domain,
    ExportJob,
    Review,
    Task,
    TaskSet,
    TaskSetMember,
    TaskVersion,
    Team,
    WorldFile,
)


@admin.register(Domain)
class DomainAdmin(admin.ModelAdmin):
    list_display = ["slug", "name"]


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ["name"]
    filter_horizontal = ["members"]


class TaskVersionInline(admin.TabularInline):
    model = TaskVersion
    fields = ["number", "state", "content_hash", "submitted_at", "decided_at"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True


@admin.register(Task)
class TaskAdmin(admin.ModelAdmin):
    list_display = ["slug", "title", "domain", "status", "owner", "updated_at"]
    list_filter = ["status", "domain"]
    search_fields = ["slug", "title"]
    raw_id_fields = ["owner"]
    inlines = [TaskVersionInline]


# Versions, files and criteria change only through the services, which keep submitted versions frozen.
class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(TaskVersion)
class TaskVersionAdmin(ReadOnlyAdmin):
    list_display = ["task", "number", "state", "content_hash", "submitted_at"]
    list_filter = ["state"]
    search_fields = ["task__slug", "content_hash"]


@admin.register(WorldFile)
class WorldFileAdmin(ReadOnlyAdmin):
    list_display = ["path", "version", "kind", "extraction_status"]
    list_filter = ["kind", "extraction_status"]
    search_fields = ["path"]


@admin.register(Criterion)
class CriterionAdmin(ReadOnlyAdmin):
    list_display = ["version", "key", "kind", "required", "weight"]
    list_filter = ["kind"]


@admin.register(Blob)
class BlobAdmin(ReadOnlyAdmin):
    list_display = ["sha256", "size", "mime_type", "created_at"]


@admin.register(Review)
class ReviewAdmin(ReadOnlyAdmin):
    list_display = ["version", "reviewer", "decision", "created_at"]
    list_filter = ["decision"]


class TaskSetMemberInline(admin.TabularInline):
    model = TaskSetMember
    raw_id_fields = ["version"]
    extra = 0


@admin.register(TaskSet)
class TaskSetAdmin(admin.ModelAdmin):
    list_display = ["name", "owner", "seed", "eval_fraction", "created_at"]
    inlines = [TaskSetMemberInline]


@admin.register(ExportJob)
class ExportJobAdmin(ReadOnlyAdmin):
    list_display = ["label", "owner", "status", "done", "total", "created_at", "finished_at"]
    list_filter = ["status"]
