"""Deployment of the service to AWS: CloudFormation templates, the engine layer, the app package."""
