"""CPU stand-in of transformer_engine.common (TE 1.x): its package check, which TE 1.x answers with
``pip show`` in a subprocess; here every call is recorded and answers what no metadata would."""

CALLS = []


def is_package_installed(package):
    CALLS.append(package)
    return "asked pip"
