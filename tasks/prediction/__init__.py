"""The business half: calibrated probability with interval, score, decisions, reason codes.

Public functions are named `predict_*`. Nothing here imports an ML runtime or `tasks.inference`:
prediction reads the raw margins and contributions that inference hands over in `tasks.contracts`.
"""
