"""The engineering half: model registry, engines, devices, raw margins and contributions.

Public functions are named `inference_*`; nothing here imports `tasks.prediction`.
"""
