"""Initial schema: jobs, transitions, instances, leases, log events, API tokens

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('api_tokens',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('name', sa.String(length=64), nullable=False),
    sa.Column('prefix', sa.String(length=12), nullable=False),
    sa.Column('token_hash', sa.String(length=64), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('last_used_at', sa.DateTime(), nullable=True),
    sa.Column('revoked_at', sa.DateTime(), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('token_hash')
    )
    op.create_table('training_jobs',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('name', sa.String(length=63), nullable=False),
    sa.Column('spec', sa.JSON(), nullable=False),
    sa.Column('backend', sa.String(length=32), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('secondary_status', sa.String(length=32), nullable=False),
    sa.Column('failure_reason', sa.String(length=1024), nullable=True),
    sa.Column('stop_reason', sa.String(length=32), nullable=True),
    sa.Column('model_artifacts', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=False),
    sa.Column('launched_at', sa.DateTime(), nullable=True),
    sa.Column('training_start_time', sa.DateTime(), nullable=True),
    sa.Column('training_end_time', sa.DateTime(), nullable=True),
    sa.Column('stop_signalled_at', sa.DateTime(), nullable=True),
    sa.Column('ended_at', sa.DateTime(), nullable=True),
    sa.Column('billable_seconds', sa.Integer(), nullable=True),
    sa.Column('version', sa.Integer(), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('name')
    )
    op.create_index('ix_training_jobs_created', 'training_jobs', ['created_at', 'id'])
    op.create_index(op.f('ix_training_jobs_status'), 'training_jobs', ['status'])

    op.create_table('job_instances',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('job_id', sa.String(length=32), nullable=False),
    sa.Column('host', sa.String(length=32), nullable=False),
    sa.Column('phase', sa.String(length=16), nullable=False),
    sa.Column('message', sa.Text(), nullable=False),
    sa.Column('exit_code', sa.Integer(), nullable=True),
    sa.Column('failure_reason', sa.String(length=1024), nullable=True),
    sa.Column('model_uri', sa.Text(), nullable=True),
    sa.Column('training_started_at', sa.DateTime(), nullable=True),
    sa.Column('training_ended_at', sa.DateTime(), nullable=True),
    sa.Column('reported_at', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['training_jobs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('job_id', 'host', name='uq_job_instances_job_host')
    )
    op.create_table('job_leases',
    sa.Column('job_id', sa.String(length=32), nullable=False),
    sa.Column('owner', sa.String(length=64), nullable=True),
    sa.Column('until', sa.DateTime(), nullable=True),
    sa.Column('requested', sa.Boolean(), nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['training_jobs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('job_id')
    )
    op.create_table('job_transitions',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('job_id', sa.String(length=32), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('secondary_status', sa.String(length=32), nullable=False),
    sa.Column('start_time', sa.DateTime(), nullable=False),
    sa.Column('end_time', sa.DateTime(), nullable=True),
    sa.Column('message', sa.Text(), nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['training_jobs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index('ix_job_transitions_job', 'job_transitions', ['job_id', 'id'])

    op.create_table('log_events',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('job_id', sa.String(length=32), nullable=False),
    sa.Column('host', sa.String(length=32), nullable=False),
    sa.Column('stream', sa.String(length=8), nullable=False),
    sa.Column('seq', sa.Integer(), nullable=False),
    sa.Column('time', sa.DateTime(), nullable=False),
    sa.Column('message', sa.Text(), nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['training_jobs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('job_id', 'host', 'seq', name='uq_log_events_job_host_seq')
    )
    op.create_index('ix_log_events_job_id', 'log_events', ['job_id', 'id'])
    op.create_index('ix_log_events_job_time', 'log_events', ['job_id', 'time', 'id'])



def downgrade() -> None:
    op.drop_index('ix_log_events_job_time', table_name='log_events')
    op.drop_index('ix_log_events_job_id', table_name='log_events')

    op.drop_table('log_events')
    op.drop_index('ix_job_transitions_job', table_name='job_transitions')

    op.drop_table('job_transitions')
    op.drop_table('job_leases')
    op.drop_table('job_instances')
    op.drop_index(op.f('ix_training_jobs_status'), table_name='training_jobs')
    op.drop_index('ix_training_jobs_created', table_name='training_jobs')

    op.drop_table('training_jobs')
    op.drop_table('api_tokens')
