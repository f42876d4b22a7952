from celery import shared_task


@shared_task(name="webapp.echo")
def echo(payload: dict) -> dict:
    """Round-trips a payload through the broker and a worker; used by health tests and operators."""
    return {"echo": payload}
