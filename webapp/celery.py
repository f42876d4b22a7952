"""The Celery app. Broker and result settings come from Django settings (CELERY_ namespace)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

app = Celery("practicum")
app.config_from_object("django.conf:settings", namespace="CELERY")


@app.on_configure.connect
def _configure_filesystem_broker(sender: Celery, **_kwargs) -> None:
    # The embedded broker keeps its queues in folders under var/; they must exist before use. The settings
    # module, not django.conf.settings: a test that overrides the broker URL while the app happens to be
    # configured must not leave the real file-system broker without its folders.
    from webapp import settings

    if not settings.CELERY_BROKER_URL.startswith("filesystem://"):
        return
    folder = settings.CELERY_BROKER_DIR
    for sub in ("queue", "processed", "control"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    sender.conf.broker_transport_options = {
        "data_folder_in": str(folder / "queue"),
        "data_folder_out": str(folder / "queue"),
        "processed_folder": str(folder / "processed"),
        "control_folder": str(folder / "control"),
        "store_processed": False,
    }
    results = settings.CELERY_RESULT_BACKEND
    if results.startswith("file://"):
        os.makedirs(results.removeprefix("file://"), exist_ok=True)


app.autodiscover_tasks()
