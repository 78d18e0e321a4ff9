"""One error for what flashjit does not do, naming the feature (never a silent substitute)."""


def unsupported(feature, why):
    raise NotImplementedError("flashjit (fa_compat shim): %s is not supported: %s" % (feature, why))
