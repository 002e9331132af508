"""Learning-rate schedule."""


def noam_lambda(d_model: int, warmup: int):
    """Built in chapter 10. The factor f(step) = d^-0.5 * min(step^-0.5, step * warmup^-1.5)
    for LambdaLR.

    Use it with base lr 1.0: LambdaLR sets lr = base_lr * f(step). It rises linearly for
    `warmup` steps, peaks at d^-0.5 * warmup^-0.5, then decays as 1/sqrt(step).
    """
    if d_model < 1 or warmup < 1:
        raise ValueError(f"need d_model >= 1 and warmup >= 1, got {d_model=}, {warmup=}")

    def factor(step: int) -> float:
        step = step + 1  # LambdaLR starts counting at 0; avoid 0 ** -0.5
        return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)

    return factor
