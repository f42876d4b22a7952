"""A thin client of Ray's Jobs API: submit (through Ray's SDK), and status, stop and logs over HTTP with timeouts.

Submission goes through `JobSubmissionClient` because it packages and uploads the working
directory. The calls the reconciler makes every few seconds go straight to the documented REST
routes with a timeout: the SDK's requests have none, and a head that hangs must not hang the
reconciler (a run whose cluster stops answering is failed after RUN_LOST_AFTER_SECONDS).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import httpx

log = logging.getLogger(__name__)

TIMEOUT_SECONDS = 5.0
# Ray's JobStatus values; the terminal ones never change again.
PENDING, RUNNING, STOPPED, SUCCEEDED, FAILED = "PENDING", "RUNNING", "STOPPED", "SUCCEEDED", "FAILED"
TERMINAL = {STOPPED, SUCCEEDED, FAILED}


class RayUnavailable(Exception):
    """The Ray cluster did not answer (or answered with a server error); the message says how."""


class RaySubmitRefused(Exception):
    """Ray answered and refused the job (a bad runtime environment, an entrypoint it cannot run)."""


@dataclass(frozen=True)
class JobInfo:
    status: str
    message: str
    exit_code: int | None


def check_address(address: str) -> str:
    """The Jobs API base URL, or ValueError saying what is wrong with the configured address."""
    address = (address or "").strip().rstrip("/")
    if not address:
        raise ValueError(
            "RAY_ADDRESS is not set: runs need the Jobs API address of a Ray cluster, e.g. http://127.0.0.1:8265 "
            "(scripts/start sets it for the local head)"
        )
    if not address.startswith(("http://", "https://")):
        raise ValueError(
            f"RAY_ADDRESS {address!r} is not a Jobs API address; use the dashboard URL, e.g. http://head:8265"
        )
    return address


def _headers() -> dict[str, str]:
    """Ray's token header when the cluster uses token authentication (RAY_AUTH_MODE=token)."""
    try:
        from ray._private.authentication.http_token_authentication import get_auth_headers_if_auth_enabled
    except ImportError:  # an older Ray without token authentication
        return {}
    return get_auth_headers_if_auth_enabled({})


def _request(method: str, url: str) -> httpx.Response:
    try:
        response = httpx.request(method, url, headers=_headers(), timeout=TIMEOUT_SECONDS)
    except httpx.HTTPError as error:
        raise RayUnavailable(f"{type(error).__name__} from {url}: {error}") from error
    if response.status_code >= 500:
        raise RayUnavailable(f"{url} answered {response.status_code}: {response.text[:300]}")
    return response


def job_submit(
    address: str,
    *,
    submission_id: str,
    entrypoint: str,
    working_dir: str | None,
    env_vars: dict[str, str],
    metadata: dict[str, str],
) -> bool:
    """Submits the job (uploading `working_dir` when given); False when a job with this submission id
    already exists (it was submitted before)."""
    from ray.job_submission import JobSubmissionClient

    address = check_address(address)
    runtime_env: dict = {"env_vars": env_vars}
    if working_dir is not None:
        runtime_env["working_dir"] = working_dir
    try:
        client = JobSubmissionClient(address)
        client.submit_job(
            entrypoint=entrypoint, submission_id=submission_id, runtime_env=runtime_env, metadata=metadata
        )
    except ConnectionError as error:
        raise RayUnavailable(str(error)) from error
    except RuntimeError as error:
        text = str(error)
        if "already exists" in text:
            return False
        if "status code 5" in text and "status code 400" not in text:
            raise RayUnavailable(text[-1000:]) from error
        raise RaySubmitRefused(_last_line(text)) from error
    except ValueError as error:  # the SDK validates the runtime environment locally
        raise RaySubmitRefused(str(error)) from error
    return True


def job_info(address: str, submission_id: str) -> JobInfo | None:
    """The job's status, or None when the cluster answers but does not know the job."""
    response = _request("GET", f"{check_address(address)}/api/jobs/{submission_id}")
    if response.status_code == 404:
        return None
    if response.status_code != 200:
        raise RayUnavailable(f"job status answered {response.status_code}: {response.text[:300]}")
    data = response.json()
    return JobInfo(
        status=str(data.get("status", "")),
        message=str(data.get("message") or ""),
        exit_code=data.get("driver_exit_code"),
    )


def job_stop(address: str, submission_id: str) -> bool:
    """Asks Ray to stop the job (SIGTERM, then SIGKILL); False when Ray does not know it."""
    response = _request("POST", f"{check_address(address)}/api/jobs/{submission_id}/stop")
    if response.status_code == 404:
        return False
    if response.status_code != 200:
        raise RayUnavailable(f"stopping the job answered {response.status_code}: {response.text[:300]}")
    return True


def job_logs(address: str, submission_id: str) -> str | None:
    """The job's whole driver log, or None when Ray does not know the job."""
    response = _request("GET", f"{check_address(address)}/api/jobs/{submission_id}/logs")
    if response.status_code == 404:
        return None
    if response.status_code != 200:
        raise RayUnavailable(f"job logs answered {response.status_code}: {response.text[:300]}")
    return str(response.json().get("logs") or "")


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip() not in ("", ".")]
    return lines[-1] if lines else text
