from django.apps import AppConfig


class TasksAuthoringConfig(AppConfig):
    name = "tasks_authoring"
    verbose_name = "Task authoring"
