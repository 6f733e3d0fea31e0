# Paper B (Min-IP) stage: being written.
MINIP_OUTPUTS = []
