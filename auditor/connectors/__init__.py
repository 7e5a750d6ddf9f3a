"""Connectors to the tools teams already run: each module reads from one tool into Auditor's
datasets (through the ingestion use cases) and, where the tool has a place for them, writes
Auditor's results back. Their client libraries are optional extras, imported only when a
connector is used."""
