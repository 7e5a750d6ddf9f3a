"""Alerts that reach people and that people act on.

- :mod:`~auditor.alerting.lifecycle`: acknowledge, reopen, assign, snooze and comment on an
  alert, each step recorded with who and when (shared by the API and the pages);
- :mod:`~auditor.alerting.routing`: the workspace's rules send its alerts to its channels
  (email lists, Slack-compatible incoming webhooks), as deliveries the workers send and
  retry beside the signed webhooks' (:mod:`auditor.webhooks`);
- :mod:`~auditor.alerting.channels`: one message to one channel, through the same
  outgoing-address filter as the webhooks;
- :mod:`~auditor.alerting.settings`: the thresholds a workspace's admins may set for it
  (the environment's values are the defaults).
"""
