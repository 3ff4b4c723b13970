from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict


class MetricPointPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    time: datetime
    value: float
    host: str


class MetricSeries(BaseModel):
    name: str
    points: list[MetricPointPublic]


class MetricsPublic(BaseModel):
    metrics: list[MetricSeries]
