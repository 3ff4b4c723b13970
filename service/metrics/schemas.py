from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict


class MetricPointPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    time: datetime
    # A stored point's value, or, downsampled, the mean of the bucket that starts at time.
    value: float
    host: str
    # Downsampled only: how many points the bucket holds, and the least and greatest.
    count: int | None = None
    minimum: float | None = None
    maximum: float | None = None


class MetricSeries(BaseModel):
    name: str
    points: list[MetricPointPublic]
    # The width of each point's bucket when the series is downsampled; None: stored points.
    bucket_seconds: float | None = None


class MetricsPublic(BaseModel):
    metrics: list[MetricSeries]
