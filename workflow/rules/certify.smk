# Stage 2: exact worst case and certificates per unit (filled in by the certification issue).
CERTIFY_OUTPUTS = []
