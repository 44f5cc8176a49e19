"""Operations: sweeps, scheduler, metrics, readiness, abuse limits, request logging."""
