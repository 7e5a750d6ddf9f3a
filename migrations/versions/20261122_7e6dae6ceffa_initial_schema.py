"""Initial schema: tenants, datasets, annotations with history, models, imports, audit results.

Revision ID: 7e6dae6ceffa
Revises: 
Create Date: 2026-11-22 07:53:41.505255
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = '7e6dae6ceffa'
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('annotation',
    sa.Column('dataset_id', sa.Integer(), nullable=False),
    sa.Column('item_id', sa.BigInteger(), nullable=False),
    sa.Column('annotator_id', sa.Integer(), nullable=False),
    sa.Column('label', sa.SmallInteger(), nullable=False),
    sa.Column('annotated_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('batch_id', sa.BigInteger(), nullable=False),
    sa.Column('data_version', sa.BigInteger(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    sa.PrimaryKeyConstraint('dataset_id', 'item_id', 'annotator_id', name=op.f('pk_annotation'))
    )
    op.create_table('annotation_history',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('dataset_id', sa.Integer(), nullable=False),
    sa.Column('item_id', sa.BigInteger(), nullable=False),
    sa.Column('annotator_id', sa.Integer(), nullable=False),
    sa.Column('label', sa.SmallInteger(), nullable=False),
    sa.Column('annotated_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('batch_id', sa.BigInteger(), nullable=False),
    sa.Column('data_version', sa.BigInteger(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('superseded_by_batch_id', sa.BigInteger(), nullable=False),
    sa.Column('superseded_version', sa.BigInteger(), nullable=False),
    sa.Column('superseded_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_annotation_history'))
    )
    with op.batch_alter_table('annotation_history', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_annotation_history_dataset_id_item_id_annotator_id'), ['dataset_id', 'item_id', 'annotator_id'], unique=False)

    op.create_table('workspace',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('slug', sa.String(length=100), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_workspace')),
    sa.UniqueConstraint('slug', name=op.f('uq_workspace_slug'))
    )
    op.create_table('annotator',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('workspace_id', sa.Integer(), nullable=False),
    sa.Column('external_id', sa.String(length=512), nullable=False),
    sa.Column('vendor', sa.String(length=200), nullable=True),
    sa.Column('tier', sa.Enum('crowd', 'expert', name='tier', native_enum=False, create_constraint=True, length=24), server_default='crowd', nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    sa.ForeignKeyConstraint(['workspace_id'], ['workspace.id'], name=op.f('fk_annotator_workspace_id_workspace'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_annotator')),
    sa.UniqueConstraint('workspace_id', 'external_id', name=op.f('uq_annotator_workspace_id_external_id'))
    )
    with op.batch_alter_table('annotator', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_annotator_vendor'), ['vendor'], unique=False)

    op.create_table('dataset',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('workspace_id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('description', sa.Text(), server_default='', nullable=False),
    sa.Column('labels', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('data_version', sa.BigInteger(), server_default='0', nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    sa.CheckConstraint('data_version >= 0', name=op.f('ck_dataset_data_version_nonnegative')),
    sa.ForeignKeyConstraint(['workspace_id'], ['workspace.id'], name=op.f('fk_dataset_workspace_id_workspace'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_dataset')),
    sa.UniqueConstraint('workspace_id', 'name', name=op.f('uq_dataset_workspace_id_name'))
    )
    with op.batch_alter_table('dataset', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_dataset_workspace_id'), ['workspace_id'], unique=False)

    op.create_table('model',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('workspace_id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('description', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    sa.ForeignKeyConstraint(['workspace_id'], ['workspace.id'], name=op.f('fk_model_workspace_id_workspace'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_model')),
    sa.UniqueConstraint('workspace_id', 'name', name=op.f('uq_model_workspace_id_name'))
    )
    op.create_table('users',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('workspace_id', sa.Integer(), nullable=False),
    sa.Column('email', sa.String(length=320), nullable=False),
    sa.Column('display_name', sa.String(length=200), nullable=True),
    sa.Column('role', sa.Enum('admin', 'analyst', 'vendor', 'viewer', name='role', native_enum=False, create_constraint=True, length=24), nullable=False),
    sa.Column('vendor', sa.String(length=200), nullable=True),
    sa.Column('password_hash', sa.String(length=255), nullable=True),
    sa.Column('is_active', sa.Boolean(), server_default=sa.true(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    sa.ForeignKeyConstraint(['workspace_id'], ['workspace.id'], name=op.f('fk_users_workspace_id_workspace'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_users')),
    sa.UniqueConstraint('workspace_id', 'email', name=op.f('uq_users_workspace_id_email'))
    )
    with op.batch_alter_table('users', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_users_workspace_id'), ['workspace_id'], unique=False)

    op.create_table('api_token',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('user_id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('token_hash', sa.String(length=128), nullable=False),
    sa.Column('prefix', sa.String(length=16), nullable=False),
    sa.Column('role', sa.Enum('admin', 'analyst', 'vendor', 'viewer', name='token_role', native_enum=False, create_constraint=True, length=24), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    sa.Column('last_used_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('expires_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('revoked_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['user_id'], ['users.id'], name=op.f('fk_api_token_user_id_users'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_api_token')),
    sa.UniqueConstraint('token_hash', name=op.f('uq_api_token_token_hash'))
    )
    with op.batch_alter_table('api_token', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_api_token_user_id'), ['user_id'], unique=False)

    op.create_table('audit_run',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('dataset_id', sa.Integer(), nullable=False),
    sa.Column('data_version', sa.BigInteger(), nullable=False),
    sa.Column('status', sa.Enum('queued', 'running', 'succeeded', 'failed', name='audit_status', native_enum=False, create_constraint=True, length=24), server_default='queued', nullable=False),
    sa.Column('task_id', sa.String(length=200), nullable=True),
    sa.Column('parameters', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.Column('summary', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['dataset_id'], ['dataset.id'], name=op.f('fk_audit_run_dataset_id_dataset'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_audit_run'))
    )
    with op.batch_alter_table('audit_run', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_audit_run_dataset_id_status'), ['dataset_id', 'status'], unique=False)

    op.create_table('dataset_grant',
    sa.Column('dataset_id', sa.Integer(), nullable=False),
    sa.Column('user_id', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    sa.ForeignKeyConstraint(['dataset_id'], ['dataset.id'], name=op.f('fk_dataset_grant_dataset_id_dataset'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['user_id'], ['users.id'], name=op.f('fk_dataset_grant_user_id_users'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('dataset_id', 'user_id', name=op.f('pk_dataset_grant'))
    )
    with op.batch_alter_table('dataset_grant', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_dataset_grant_user_id'), ['user_id'], unique=False)

    op.create_table('item',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('dataset_id', sa.Integer(), nullable=False),
    sa.Column('external_id', sa.String(length=512), nullable=False),
    sa.Column('gold_label', sa.SmallInteger(), nullable=True),
    sa.Column('gold_source', sa.String(length=200), nullable=True),
    sa.Column('label_counts', sa.JSON().with_variant(postgresql.ARRAY(sa.Integer()), 'postgresql'), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    sa.ForeignKeyConstraint(['dataset_id'], ['dataset.id'], name=op.f('fk_item_dataset_id_dataset'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_item')),
    sa.UniqueConstraint('dataset_id', 'external_id', name=op.f('uq_item_dataset_id_external_id'))
    )
    op.create_table('release',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('model_id', sa.Integer(), nullable=False),
    sa.Column('version', sa.String(length=100), nullable=False),
    sa.Column('released_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('alias', sa.String(length=100), nullable=True),
    sa.Column('tags', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    sa.ForeignKeyConstraint(['model_id'], ['model.id'], name=op.f('fk_release_model_id_model'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_release')),
    sa.UniqueConstraint('model_id', 'version', name=op.f('uq_release_model_id_version'))
    )
    op.create_table('agreement',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('audit_run_id', sa.Integer(), nullable=False),
    sa.Column('vendor', sa.String(length=200), nullable=True),
    sa.Column('coefficient', sa.String(length=50), nullable=False),
    sa.Column('value', sa.Double(), nullable=True),
    sa.Column('ci_low', sa.Double(), nullable=True),
    sa.Column('ci_high', sa.Double(), nullable=True),
    sa.Column('n_items', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    sa.ForeignKeyConstraint(['audit_run_id'], ['audit_run.id'], name=op.f('fk_agreement_audit_run_id_audit_run'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_agreement'))
    )
    with op.batch_alter_table('agreement', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_agreement_audit_run_id_vendor'), ['audit_run_id', 'vendor'], unique=False)

    op.create_table('alert',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('workspace_id', sa.Integer(), nullable=False),
    sa.Column('dataset_id', sa.Integer(), nullable=True),
    sa.Column('audit_run_id', sa.Integer(), nullable=True),
    sa.Column('kind', sa.String(length=50), nullable=False),
    sa.Column('severity', sa.Enum('info', 'warning', 'critical', name='alert_severity', native_enum=False, create_constraint=True, length=24), nullable=False),
    sa.Column('subject', sa.String(length=200), nullable=True),
    sa.Column('message', sa.Text(), nullable=False),
    sa.Column('details', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    sa.Column('acknowledged_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('acknowledged_by_id', sa.Integer(), nullable=True),
    sa.ForeignKeyConstraint(['acknowledged_by_id'], ['users.id'], name=op.f('fk_alert_acknowledged_by_id_users'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['audit_run_id'], ['audit_run.id'], name=op.f('fk_alert_audit_run_id_audit_run'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['dataset_id'], ['dataset.id'], name=op.f('fk_alert_dataset_id_dataset'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['workspace_id'], ['workspace.id'], name=op.f('fk_alert_workspace_id_workspace'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_alert'))
    )
    with op.batch_alter_table('alert', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_alert_dataset_id'), ['dataset_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_alert_workspace_id_created_at'), ['workspace_id', 'created_at'], unique=False)

    op.create_table('best_score',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('audit_run_id', sa.Integer(), nullable=False),
    sa.Column('metric', sa.String(length=50), nullable=False),
    sa.Column('value', sa.Double(), nullable=False),
    sa.Column('std_error', sa.Double(), nullable=True),
    sa.Column('n_items', sa.Integer(), nullable=False),
    sa.Column('alpha', sa.JSON().with_variant(postgresql.ARRAY(sa.Double()), 'postgresql'), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    sa.ForeignKeyConstraint(['audit_run_id'], ['audit_run.id'], name=op.f('fk_best_score_audit_run_id_audit_run'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_best_score')),
    sa.UniqueConstraint('audit_run_id', 'metric', name=op.f('uq_best_score_audit_run_id_metric'))
    )
    op.create_table('certification',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('audit_run_id', sa.Integer(), nullable=False),
    sa.Column('release_id', sa.Integer(), nullable=False),
    sa.Column('data_version', sa.BigInteger(), nullable=False),
    sa.Column('n_items_upper', sa.Integer(), nullable=False),
    sa.Column('n_items_lower', sa.Integer(), nullable=False),
    sa.Column('u_t', sa.Double(), nullable=False),
    sa.Column('u_e', sa.Double(), nullable=True),
    sa.Column('l', sa.Double(), nullable=False),
    sa.Column('tau', sa.Double(), server_default='0', nullable=False),
    sa.Column('s_hms_t', sa.Double(), nullable=True),
    sa.Column('s_oms_t', sa.Double(), nullable=True),
    sa.Column('s_hms_e', sa.Double(), nullable=True),
    sa.Column('s_oms_e', sa.Double(), nullable=True),
    sa.Column('certified', sa.Boolean(), nullable=False),
    sa.Column('certified_with', sa.String(length=8), nullable=False),
    sa.Column('verdict', sa.String(length=32), nullable=False),
    sa.Column('details', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    sa.ForeignKeyConstraint(['audit_run_id'], ['audit_run.id'], name=op.f('fk_certification_audit_run_id_audit_run'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['release_id'], ['release.id'], name=op.f('fk_certification_release_id_release'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_certification')),
    sa.UniqueConstraint('audit_run_id', 'release_id', name=op.f('uq_certification_audit_run_id_release_id'))
    )
    with op.batch_alter_table('certification', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_certification_release_id'), ['release_id'], unique=False)

    op.create_table('import_batch',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('workspace_id', sa.Integer(), nullable=False),
    sa.Column('dataset_id', sa.Integer(), nullable=False),
    sa.Column('kind', sa.Enum('annotations', 'predictions', 'gold', name='import_kind', native_enum=False, create_constraint=True, length=24), nullable=False),
    sa.Column('format', sa.String(length=32), nullable=False),
    sa.Column('source_name', sa.String(length=1024), nullable=True),
    sa.Column('release_id', sa.Integer(), nullable=True),
    sa.Column('submitted_by_id', sa.Integer(), nullable=True),
    sa.Column('submitted_by', sa.String(length=200), nullable=True),
    sa.Column('row_count', sa.BigInteger(), nullable=False),
    sa.Column('checksum', sa.String(length=64), nullable=False),
    sa.Column('idempotency_key', sa.String(length=200), nullable=True),
    sa.Column('data_version', sa.BigInteger(), nullable=False),
    sa.Column('stats', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    sa.ForeignKeyConstraint(['dataset_id'], ['dataset.id'], name=op.f('fk_import_batch_dataset_id_dataset'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['release_id'], ['release.id'], name=op.f('fk_import_batch_release_id_release'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['submitted_by_id'], ['users.id'], name=op.f('fk_import_batch_submitted_by_id_users'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['workspace_id'], ['workspace.id'], name=op.f('fk_import_batch_workspace_id_workspace'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_import_batch')),
    sa.UniqueConstraint('dataset_id', 'checksum', name=op.f('uq_import_batch_dataset_id_checksum')),
    sa.UniqueConstraint('dataset_id', 'idempotency_key', name=op.f('uq_import_batch_dataset_id_idempotency_key'))
    )
    with op.batch_alter_table('import_batch', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_import_batch_release_id'), ['release_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_import_batch_submitted_by_id'), ['submitted_by_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_import_batch_workspace_id'), ['workspace_id'], unique=False)

    op.create_table('power_curve',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('audit_run_id', sa.Integer(), nullable=False),
    sa.Column('release_id', sa.Integer(), nullable=True),
    sa.Column('vendor', sa.String(length=200), nullable=True),
    sa.Column('reference', sa.String(length=50), nullable=False),
    sa.Column('combiner', sa.String(length=50), nullable=False),
    sa.Column('scorer', sa.String(length=50), nullable=False),
    sa.Column('max_k', sa.Integer(), nullable=False),
    sa.Column('n_bootstrap', sa.Integer(), nullable=False),
    sa.Column('seed', sa.BigInteger(), nullable=True),
    sa.Column('points', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('classifier_score', sa.Double(), nullable=True),
    sa.Column('classifier_low', sa.Double(), nullable=True),
    sa.Column('classifier_high', sa.Double(), nullable=True),
    sa.Column('equivalence', sa.Double(), nullable=True),
    sa.Column('equivalence_low', sa.Double(), nullable=True),
    sa.Column('equivalence_high', sa.Double(), nullable=True),
    sa.Column('equivalence_note', sa.String(length=16), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    sa.ForeignKeyConstraint(['audit_run_id'], ['audit_run.id'], name=op.f('fk_power_curve_audit_run_id_audit_run'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['release_id'], ['release.id'], name=op.f('fk_power_curve_release_id_release'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_power_curve'))
    )
    with op.batch_alter_table('power_curve', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_power_curve_audit_run_id_release_id'), ['audit_run_id', 'release_id'], unique=False)

    op.create_table('vendor_report',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('audit_run_id', sa.Integer(), nullable=False),
    sa.Column('vendor', sa.String(length=200), nullable=False),
    sa.Column('n_annotators', sa.Integer(), nullable=False),
    sa.Column('n_items', sa.Integer(), nullable=False),
    sa.Column('n_annotations', sa.BigInteger(), nullable=False),
    sa.Column('u_t', sa.Double(), nullable=True),
    sa.Column('u_e', sa.Double(), nullable=True),
    sa.Column('agreement', sa.Double(), nullable=True),
    sa.Column('expert_equivalence', sa.Double(), nullable=True),
    sa.Column('annotators', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.Column('details', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    sa.ForeignKeyConstraint(['audit_run_id'], ['audit_run.id'], name=op.f('fk_vendor_report_audit_run_id_audit_run'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_vendor_report')),
    sa.UniqueConstraint('audit_run_id', 'vendor', name=op.f('uq_vendor_report_audit_run_id_vendor'))
    )
    op.create_table('audit_outbox',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('dataset_id', sa.Integer(), nullable=False),
    sa.Column('data_version', sa.BigInteger(), nullable=False),
    sa.Column('batch_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=True),
    sa.Column('reason', sa.String(length=50), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    sa.Column('processed_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['batch_id'], ['import_batch.id'], name=op.f('fk_audit_outbox_batch_id_import_batch'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['dataset_id'], ['dataset.id'], name=op.f('fk_audit_outbox_dataset_id_dataset'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_audit_outbox'))
    )
    with op.batch_alter_table('audit_outbox', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_audit_outbox_dataset_id'), ['dataset_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_audit_outbox_processed_at_id'), ['processed_at', 'id'], unique=False)

    op.create_table('prediction',
    sa.Column('release_id', sa.Integer(), nullable=False),
    sa.Column('item_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('dataset_id', sa.Integer(), nullable=False),
    sa.Column('label', sa.SmallInteger(), nullable=True),
    sa.Column('probabilities', sa.JSON().with_variant(postgresql.ARRAY(sa.Double()), 'postgresql'), nullable=True),
    sa.Column('batch_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('data_version', sa.BigInteger(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    sa.CheckConstraint('label IS NOT NULL OR probabilities IS NOT NULL', name=op.f('ck_prediction_label_or_probabilities')),
    sa.ForeignKeyConstraint(['batch_id'], ['import_batch.id'], name=op.f('fk_prediction_batch_id_import_batch'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['dataset_id'], ['dataset.id'], name=op.f('fk_prediction_dataset_id_dataset'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['item_id'], ['item.id'], name=op.f('fk_prediction_item_id_item'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['release_id'], ['release.id'], name=op.f('fk_prediction_release_id_release'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('release_id', 'item_id', name=op.f('pk_prediction'))
    )
    with op.batch_alter_table('prediction', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_prediction_batch_id'), ['batch_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_prediction_dataset_id_release_id'), ['dataset_id', 'release_id'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('prediction', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_prediction_dataset_id_release_id'))
        batch_op.drop_index(batch_op.f('ix_prediction_batch_id'))

    op.drop_table('prediction')
    with op.batch_alter_table('audit_outbox', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_audit_outbox_processed_at_id'))
        batch_op.drop_index(batch_op.f('ix_audit_outbox_dataset_id'))

    op.drop_table('audit_outbox')
    op.drop_table('vendor_report')
    with op.batch_alter_table('power_curve', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_power_curve_audit_run_id_release_id'))

    op.drop_table('power_curve')
    with op.batch_alter_table('import_batch', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_import_batch_workspace_id'))
        batch_op.drop_index(batch_op.f('ix_import_batch_submitted_by_id'))
        batch_op.drop_index(batch_op.f('ix_import_batch_release_id'))

    op.drop_table('import_batch')
    with op.batch_alter_table('certification', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_certification_release_id'))

    op.drop_table('certification')
    op.drop_table('best_score')
    with op.batch_alter_table('alert', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_alert_workspace_id_created_at'))
        batch_op.drop_index(batch_op.f('ix_alert_dataset_id'))

    op.drop_table('alert')
    with op.batch_alter_table('agreement', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_agreement_audit_run_id_vendor'))

    op.drop_table('agreement')
    op.drop_table('release')
    op.drop_table('item')
    with op.batch_alter_table('dataset_grant', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_dataset_grant_user_id'))

    op.drop_table('dataset_grant')
    with op.batch_alter_table('audit_run', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_audit_run_dataset_id_status'))

    op.drop_table('audit_run')
    with op.batch_alter_table('api_token', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_api_token_user_id'))

    op.drop_table('api_token')
    with op.batch_alter_table('users', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_users_workspace_id'))

    op.drop_table('users')
    op.drop_table('model')
    with op.batch_alter_table('dataset', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_dataset_workspace_id'))

    op.drop_table('dataset')
    with op.batch_alter_table('annotator', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_annotator_vendor'))

    op.drop_table('annotator')
    op.drop_table('workspace')
    with op.batch_alter_table('annotation_history', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_annotation_history_dataset_id_item_id_annotator_id'))

    op.drop_table('annotation_history')
    op.drop_table('annotation')
