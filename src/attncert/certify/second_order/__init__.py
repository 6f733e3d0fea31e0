"""Second-order certificate: the exponential-cone moment relaxation and its weak-duality certification.

    relaxation        variables, constraints, objective shared by both query modes; fallback rule
    facets            zonotope facets (linf) chosen by cutting planes
    fixed, varying    the relaxation for a fixed / a varying query
    varying_factored  the varying query with factored weights a_j = tau e^{eta_j} e^{sigma_j + beta_j} (default)
    dual_certificate  weak duality with a box, dual repair and outward rounding
    compiled          the solve path: cvxpy's compiled data refilled per solve, Clarabel called directly
    certificate       `second_order_certificate`: dispatch on mode and sense
"""
from attncert.certify.second_order.certificate import second_order_certificate
from attncert.certify.second_order.relaxation import SecondOrderResult

__all__ = ["second_order_certificate", "SecondOrderResult"]
