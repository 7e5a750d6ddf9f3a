"""Actions: what the web pages, the JSON API and the command line all do, one function each.

The three front ends parse their input (a form, a JSON body, command-line options), call the
action, and render its result (a page and a flash message, a JSON answer, a line of text);
the rules, the records of who did what, and the retries of races live here, once (as
Superset's commands). Actions take a SQLAlchemy session and import neither Flask nor click.

* :mod:`auditor.actions.accounts` — passwords, API tokens, users (activate, deactivate);
* :mod:`auditor.actions.alerts` — an alert's lifecycle steps (acknowledge, reopen, assign,
  snooze, comment);
* :mod:`auditor.actions.prices` — a vendor's price per label (set, clear);
* :mod:`auditor.actions.plans` — ask a worker for a release's audit plan.
"""
