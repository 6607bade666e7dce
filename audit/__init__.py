"""The background audit, imported as `mlgate_audit`: the stored objects judged by the engine, as PolicyReports.

Modules: `state` (pure: objects, results, what to judge and write), `events` (pure: Warning Events and their
pacing), `runner` (watches, leader lease, writes), `metrics`, `command` (click). Importing the package imports
nothing else.
"""
