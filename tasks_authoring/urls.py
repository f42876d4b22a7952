from django.urls import path

from tasks_authoring.views import bundles, editor, reviews, rubric, task_sets, tasks, world

app_name = "tasks_authoring"

urlpatterns = [
    path("tasks/", tasks.task_list, name="task_list"),
    path("tasks/new/", tasks.task_create, name="task_create"),
    path("tasks/import/", bundles.bundle_import, name="import"),
    path("tasks/preview/", editor.markdown_preview, name="markdown_preview"),
    path("tasks/<int:pk>/", tasks.task_detail, name="task_detail"),
    path("tasks/<int:pk>/diff/", tasks.version_diff, name="version_diff"),
    path("tasks/<int:pk>/agent/", tasks.agent_view, name="agent_view"),
    path("tasks/<int:pk>/submit/", tasks.task_submit, name="task_submit"),
    path("tasks/<int:pk>/new-draft/", tasks.task_new_draft, name="task_new_draft"),
    path("tasks/<int:pk>/archive/", tasks.task_archive, name="task_archive"),
    path("tasks/<int:pk>/edit/", editor.task_edit, name="task_edit"),
    path("tasks/<int:pk>/export/", bundles.version_export, name="version_export"),
    path("tasks/<int:pk>/world/", world.world_manager, name="world_manager"),
    path("tasks/<int:pk>/world/status/", world.world_status, name="world_status"),
    path("tasks/<int:pk>/world/upload/", world.world_upload, name="world_upload"),
    path("tasks/<int:pk>/world/<int:file_id>/", world.world_file_preview, name="world_file"),
    path("tasks/<int:pk>/world/<int:file_id>/move/", world.world_file_move, name="world_file_move"),
    path("tasks/<int:pk>/world/<int:file_id>/delete/", world.world_file_delete, name="world_file_delete"),
    path("tasks/<int:pk>/rubric/", rubric.rubric_editor, name="rubric"),
    path("tasks/<int:pk>/rubric/add/", rubric.criterion_add, name="criterion_add"),
    path("tasks/<int:pk>/rubric/try/", rubric.rubric_try, name="rubric_try"),
    path("tasks/<int:pk>/rubric/<int:criterion_id>/edit/", rubric.criterion_edit, name="criterion_edit"),
    path("tasks/<int:pk>/rubric/<int:criterion_id>/move/", rubric.criterion_move, name="criterion_move"),
    path(
        "tasks/<int:pk>/rubric/<int:criterion_id>/delete/", rubric.criterion_delete, name="criterion_delete"
    ),
    path("tasks/<int:pk>/review/", reviews.review_decide, name="review_decide"),
    path("reviews/", reviews.review_queue, name="review_queue"),
    path("task-sets/", task_sets.task_set_list, name="task_set_list"),
    path("task-sets/new/", task_sets.task_set_create, name="task_set_create"),
    path("task-sets/<int:pk>/", task_sets.task_set_detail, name="task_set_detail"),
    path("task-sets/<int:pk>/export/", bundles.task_set_export, name="task_set_export"),
    path("exports/<int:pk>/", bundles.export_job_detail, name="export_job"),
    path("exports/<int:pk>/download/", bundles.export_job_download, name="export_job_download"),
]
