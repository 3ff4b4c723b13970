"""The runtime's reports to the service: phases, log lines, failures, spot notices."""
