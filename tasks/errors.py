"""Errors a user can act on. The CLI prints these as one line; anything else is a bug."""


class ScoringError(Exception):
    """Base class of errors caused by input, configuration or artifacts, not by our code."""


class JobSpecError(ScoringError):
    """A job spec is missing or invalid."""


class PartitionError(ScoringError):
    """A partition date or its raw data is unusable."""


class FeatureVersionMismatch(ScoringError):
    """The model was trained on other features than the feature module computes."""


class ModelArtifactError(ScoringError):
    """A model file or its metadata cannot be trusted."""


class GuardFailure(ScoringError):
    """A feature guard whose action is `fail` found violations, or a run-level limit was exceeded."""


class SuiteError(ScoringError):
    """An expectation suite is malformed or uses an expectation the guards cannot honour."""


class DeviceUnavailable(ScoringError):
    """The job asks for a device (e.g. `cuda`) that this machine or runtime cannot use."""


class InferenceFailure(ScoringError):
    """Chunks kept failing in inference after their retries, beyond the job's error budget."""


class FallbackLimitExceeded(ScoringError):
    """More rows went down a fallback path (a kind in the fallback report) than the job allows."""


class LabelError(ScoringError):
    """Realized outcomes (labels) cannot be read: a missing column or table, or an outcome that is not 0/1."""


class UnsafePath(ScoringError):
    """A path built from input that would leave the data root."""


class PartitionBusy(ScoringError):
    """Another live run holds the partition's lease, and waiting for it timed out."""


class PartitionLeaseLost(ScoringError):
    """The run's partition lease was taken over while it ran; it must not publish."""
