"""The live console: a read-only web page of the fabric, its loads, routes and jobs.

:mod:`~sdnmpi.console.view` turns what the controller's API and the manager answer
into the page's JSON (pure); :mod:`~sdnmpi.console.server` is the companion process
that asks them and serves the page (``sdnmpi console run``, docs/CONSOLE.md).
"""
