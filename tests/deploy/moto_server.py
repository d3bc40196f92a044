"""moto's server as the deployment proofs run it, and what it lacks for `make deploy` filled in.

`make deploy` and `make destroy` run here unchanged, their AWS calls sent to this server
(AWS_ENDPOINT_URL). Where moto answers differently from AWS, or not at all, the gap is filled below,
in the server's own process and never in the product; each names what AWS does:

- `schedule_groups`: moto's CloudFormation skips an AWS::Scheduler::ScheduleGroup (and its outputs); AWS
  makes the group.
- `layer_version_ref`: moto answers Ref of an AWS::Lambda::LayerVersion with the object's repr; AWS with
  the version's ARN.
- `stack_resources_added_back`: moto's CloudFormation deletes a resource an update removes but keeps it
  in the stack's map, so that an update adding it back (an upgrade after a rollback) makes nothing; AWS
  makes it anew.
- `swagger_import`: moto's API Gateway imports OpenAPI 3 documents only, and requires `info.description`;
  AWS imports the Swagger 2.0 document `chalice deploy` sends, without a description.
- `ecr_empty_on_delete`: moto's CloudFormation ignores an AWS::ECR::Repository's EmptyOnDelete, and
  refuses to delete a repository holding images; AWS deletes them with it (infra/artifacts.yaml sets it).
- `bedrock_models`: moto has no Bedrock model catalogue (GetFoundationModel,
  GetFoundationModelAvailability): every model is answered as Bedrock answers a model served on demand
  that the account may call (the refusals are proven in tests/unit/test_deploy_checks.py).
- `sesv2_account`: moto has no SES v2 GetAccount; answered as an account out of SES's sandbox.
- `cognito_user_pools`: moto's CloudFormation skips AWS::Cognito::UserPool, UserPoolClient,
  UserPoolDomain and UserPoolIdentityProvider; AWS makes them (moto's Cognito serves them once made),
  and leaves out what an AWS::NoValue stands for, in a list too (moto gives None).
- `bucket_cors`: moto's CloudFormation ignores an AWS::S3::Bucket's CorsConfiguration, when it makes the
  bucket and when it updates it; AWS gives the bucket those CORS rules, and removes them with the property.

And one speed-up, not a gap: `lambda_code_decoded_once`. `chalice deploy` sends the same zip (17 MB) with
each of its two dozen functions, and moto decodes and hashes it twice a call; the last zip's decoding is
kept and given again for the same text (tests/unit/test_moto_speedups.py holds it equal to moto's own).

And one instrument, not a gap: `faults`. A file named after an operation in the directory
PROOF_FAULTS_DIR makes its next call fail (then the file is removed), as AWS may fail a call half-way
through a deploy: CreateDeployment, the last call of `chalice deploy`.

Runs as `python -c "from tests.deploy.moto_server import serve; serve()" -H <host> -p <port>`
(`MotoServer` starts it): moto registers each model class under the module that defines it, which must
not be `__main__`.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parents[2]


def schedule_groups() -> None:
    """Defining the model is registering it: moto's CloudFormation knows every CloudFormationModel subclass."""
    from moto.core.common_models import CloudFormationModel
    from moto.scheduler.models import scheduler_backends

    class ScheduleGroup(CloudFormationModel):
        def __init__(self, name: str) -> None:
            self.name = name

        @property
        def physical_resource_id(self) -> str:
            return self.name

        @staticmethod
        def cloudformation_name_type() -> str:
            return "Name"

        @staticmethod
        def cloudformation_type() -> str:
            return "AWS::Scheduler::ScheduleGroup"

        @classmethod
        def has_cfn_attr(cls, attr: str) -> bool:
            return False

        @classmethod
        def create_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name,
                                            **kwargs):
            scheduler_backends[account_id][region_name].create_schedule_group(resource_name, [])
            return cls(resource_name)

        @classmethod
        def update_from_cloudformation_json(cls, original_resource, new_resource_name, cloudformation_json,
                                            account_id, region_name):
            return original_resource

        @classmethod
        def delete_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name):
            scheduler_backends[account_id][region_name].schedule_groups.pop(resource_name, None)

        def delete(self, account_id: str, region_name: str) -> None:
            scheduler_backends[account_id][region_name].schedule_groups.pop(self.name, None)

        def is_created(self) -> bool:
            return True


def layer_version_ref() -> None:
    from moto.awslambda.models import LayerVersion

    LayerVersion.physical_resource_id = property(lambda self: self.arn)  # type: ignore[attr-defined]


def stack_resources_added_back() -> None:
    from moto.cloudformation.parsing import ResourceMap

    update = ResourceMap.update

    def forgetting_removed(self, template, parameters=None):
        removed = set(self._resource_json_map) - set(template.get("Resources", {}))
        update(self, template, parameters)
        for logical_id in removed:
            self._parsed_resources.pop(logical_id, None)

    ResourceMap.update = forgetting_removed


def swagger_import() -> None:
    from moto.apigateway.models import APIGatewayBackend

    imported, put = APIGatewayBackend.import_rest_api, APIGatewayBackend.put_rest_api

    def as_moto_reads_it(document: dict) -> dict:
        document = {**document, "info": {"description": "", **document.get("info", {})}}
        if document.pop("swagger", None):  # its paths, methods and integrations read the same
            document["openapi"] = "3.0.1"
        return document

    def import_rest_api(self, api_doc, fail_on_warnings):
        return imported(self, as_moto_reads_it(api_doc), fail_on_warnings)

    def put_rest_api(self, function_id, api_doc, fail_on_warnings, mode="merge"):
        return put(self, function_id, as_moto_reads_it(api_doc), fail_on_warnings, mode)

    APIGatewayBackend.import_rest_api = import_rest_api
    APIGatewayBackend.put_rest_api = put_rest_api


def ecr_empty_on_delete() -> None:
    from moto.ecr.models import Repository, ecr_backends

    create = Repository.create_from_cloudformation_json.__func__  # type: ignore[attr-defined]

    def create_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs):
        repository = create(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs)
        repository.empty_on_delete = bool(cloudformation_json["Properties"].get("EmptyOnDelete"))
        return repository

    def delete(self, account_id: str, region_name: str) -> None:
        ecr_backends[account_id][region_name].delete_repository(self.name, force=getattr(self, "empty_on_delete",
                                                                                          False))

    Repository.create_from_cloudformation_json = classmethod(create_from_cloudformation_json)
    Repository.delete = delete


def bedrock_models() -> None:
    from moto.bedrock.responses import BedrockResponse

    def get_foundation_model(self) -> str:
        model = unquote(self.path.rsplit("/", 1)[-1])
        return json.dumps({"modelDetails": {
            "modelArn": f"arn:aws:bedrock:{self.region}::foundation-model/{model}", "modelId": model,
            "modelName": model, "providerName": model.split(".", 1)[0], "inputModalities": ["TEXT"],
            "outputModalities": ["TEXT"], "inferenceTypesSupported": ["ON_DEMAND"],
            "modelLifecycle": {"status": "ACTIVE"}}})

    def get_foundation_model_availability(self) -> str:
        return json.dumps({"modelId": unquote(self.path.rsplit("/", 1)[-1]),
                           "agreementAvailability": {"status": "AVAILABLE"}, "authorizationStatus": "AUTHORIZED",
                           "entitlementAvailability": "AVAILABLE", "regionAvailability": "AVAILABLE"})

    BedrockResponse.get_foundation_model = get_foundation_model  # type: ignore[attr-defined]
    BedrockResponse.get_foundation_model_availability = get_foundation_model_availability  # type: ignore[attr-defined]


def sesv2_account() -> None:
    from moto.sesv2.responses import SESV2Response

    def get_account(self) -> str:
        return json.dumps({"ProductionAccessEnabled": True, "SendingEnabled": True, "EnforcementStatus": "HEALTHY",
                           "DedicatedIpAutoWarmupEnabled": False})

    SESV2Response.get_account = get_account  # type: ignore[attr-defined]


def cognito_user_pools() -> None:
    """Each type made through moto's own Cognito, as its API would make it: Ref is the pool's id, the
    client's id, the domain and the provider's name; GetAtt Arn the pool's ARN."""
    from moto.cognitoidp.models import cognitoidp_backends
    from moto.core.common_models import CloudFormationModel

    def backend(account_id: str, region_name: str):
        return cognitoidp_backends[account_id][region_name]

    class Made:
        """What the four share; each is a direct subclass of CloudFormationModel, as moto finds its
        models by CloudFormationModel.__subclasses__()."""

        def __init__(self, physical_id: str, arn: str = "", delete=None) -> None:
            self.physical_id, self.arn, self._delete = physical_id, arn, delete

        @property
        def physical_resource_id(self) -> str:
            return self.physical_id

        @staticmethod
        def cloudformation_name_type() -> str:
            return ""

        @classmethod
        def has_cfn_attr(cls, attr: str) -> bool:
            return attr == "Arn"

        def get_cfn_attribute(self, attribute_name: str) -> str:
            return self.arn

        @classmethod
        def update_from_cloudformation_json(cls, original_resource, new_resource_name, cloudformation_json,
                                            account_id, region_name):
            return original_resource

        @classmethod
        def delete_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name):
            pass

        def delete(self, account_id: str, region_name: str) -> None:
            if self._delete:
                self._delete()

        def is_created(self) -> bool:
            return True

    class UserPool(Made, CloudFormationModel):
        @staticmethod
        def cloudformation_type() -> str:
            return "AWS::Cognito::UserPool"

        @classmethod
        def create_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name,
                                            **kwargs):
            props = dict(cloudformation_json["Properties"])
            pool = backend(account_id, region_name).create_user_pool(props.pop("UserPoolName"), props)
            return cls(pool.id, pool.arn)  # retained (DeletionPolicy), as on AWS

    class UserPoolClient(Made, CloudFormationModel):
        @staticmethod
        def cloudformation_type() -> str:
            return "AWS::Cognito::UserPoolClient"

        @classmethod
        def create_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name,
                                            **kwargs):
            # moto resolves a Ref of AWS::NoValue to None (a list's item too); AWS leaves it out.
            props = {k: [i for i in v if i is not None] if isinstance(v, list) else v
                     for k, v in cloudformation_json["Properties"].items() if v is not None}
            cognito, pool = backend(account_id, region_name), props.pop("UserPoolId")
            client = cognito.create_user_pool_client(pool, bool(props.pop("GenerateSecret", False)), props)
            return cls(client.id, delete=lambda: cognito.user_pools.get(pool) and
                       cognito.user_pools[pool].clients.pop(client.id, None))

    class UserPoolDomain(Made, CloudFormationModel):
        @staticmethod
        def cloudformation_type() -> str:
            return "AWS::Cognito::UserPoolDomain"

        @classmethod
        def create_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name,
                                            **kwargs):
            props, cognito = cloudformation_json["Properties"], backend(account_id, region_name)
            cognito.create_user_pool_domain(props["UserPoolId"], props["Domain"])
            return cls(props["Domain"], delete=lambda: cognito.user_pool_domains.pop(props["Domain"], None))

    class UserPoolIdentityProvider(Made, CloudFormationModel):
        @staticmethod
        def cloudformation_type() -> str:
            return "AWS::Cognito::UserPoolIdentityProvider"

        @classmethod
        def create_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name,
                                            **kwargs):
            props = dict(cloudformation_json["Properties"])
            cognito, pool, name = backend(account_id, region_name), props.pop("UserPoolId"), props["ProviderName"]
            cognito.create_identity_provider(pool, name, props)
            return cls(name, delete=lambda: cognito.user_pools.get(pool) and
                       cognito.user_pools[pool].identity_providers.pop(name, None))


def bucket_cors() -> None:
    from moto.s3.models import FakeBucket

    create = FakeBucket.create_from_cloudformation_json.__func__  # type: ignore[attr-defined]
    update = FakeBucket.update_from_cloudformation_json.__func__  # type: ignore[attr-defined]

    def with_cors(bucket, properties: dict):
        """The template's CorsRules as PutBucketCors takes them (moto's parsed XML: one key per element)."""
        configuration = properties.get("CorsConfiguration")  # None: an AWS::NoValue, as moto resolves it
        if not configuration:
            bucket.delete_cors()
            return bucket
        rules = []
        for rule in configuration["CorsRules"]:
            made = {"AllowedMethod": rule["AllowedMethods"], "AllowedOrigin": rule["AllowedOrigins"],
                    "AllowedHeader": rule.get("AllowedHeaders", []), "ExposeHeader": rule.get("ExposedHeaders", [])}
            if "MaxAge" in rule:
                made["MaxAgeSeconds"] = str(rule["MaxAge"])
            if "Id" in rule:
                made["ID"] = rule["Id"]
            rules.append(made)
        bucket.set_cors(rules)
        return bucket

    def create_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs):
        bucket = create(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs)
        return with_cors(bucket, cloudformation_json.get("Properties", {}))

    def update_from_cloudformation_json(cls, original_resource, new_resource_name, cloudformation_json, account_id,
                                        region_name):
        bucket = update(cls, original_resource, new_resource_name, cloudformation_json, account_id, region_name)
        return with_cors(bucket, cloudformation_json["Properties"])

    FakeBucket.create_from_cloudformation_json = classmethod(create_from_cloudformation_json)
    FakeBucket.update_from_cloudformation_json = classmethod(update_from_cloudformation_json)


def decoded_once(decode):
    """`decode` (moto's `_zipfile_content`: a function's zip from its base64 text, with its size and hashes),
    its last answer kept and given again for the same text. Compared whole, not by a hash of it: a different
    zip is never answered with the last one's code."""
    last: list[tuple] = []

    def decoding(content):
        kept = last[-1] if last else None
        if kept is not None and kept[0] == content:
            return kept[1]
        answer = decode(content)
        last[:] = [(content, answer)]
        return answer

    return decoding


def lambda_code_decoded_once() -> None:
    from moto.awslambda import models

    models._zipfile_content = decoded_once(models._zipfile_content)


def faults(directory: Path) -> None:
    from moto.apigateway.exceptions import BadRequestException
    from moto.apigateway.models import APIGatewayBackend

    create_deployment = APIGatewayBackend.create_deployment

    def failing_create_deployment(self, *args, **kwargs):
        fault = directory / "CreateDeployment"
        if fault.exists():
            fault.unlink()
            raise BadRequestException("a failure the deployment proof injected (PROOF_FAULTS_DIR)")
        return create_deployment(self, *args, **kwargs)

    APIGatewayBackend.create_deployment = failing_create_deployment


def serve() -> None:
    from moto import server

    schedule_groups()
    layer_version_ref()
    stack_resources_added_back()
    swagger_import()
    ecr_empty_on_delete()
    bedrock_models()
    sesv2_account()
    cognito_user_pools()
    bucket_cors()
    lambda_code_decoded_once()
    if os.environ.get("PROOF_FAULTS_DIR"):
        faults(Path(os.environ["PROOF_FAULTS_DIR"]))
    server.main(sys.argv[1:])


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class MotoServer:
    """The server in a process of its own, on a free port; its log in `<tmp>/moto.log`; `faults` the
    directory of injected failures."""

    def __init__(self, tmp: Path, env: dict[str, str]) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.faults = tmp / "faults"
        self.faults.mkdir(exist_ok=True)
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from tests.deploy.moto_server import serve; serve()", "-H", "127.0.0.1",
             "-p", str(self.port)], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=open(tmp / "moto.log", "w"),
            env={**os.environ, **env, "PYTHONPATH": str(ROOT), "MOTO_LAMBDA_STUB_ECR": "false",
                 "PROOF_FAULTS_DIR": str(self.faults)})
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                if self.process.poll() is not None:
                    break
                time.sleep(0.2)
        raise RuntimeError(f"moto's server did not start: {(tmp / 'moto.log').read_text()[-2000:]}")

    def stop(self) -> None:
        """Ends the server: asked first, then killed (a loaded machine can keep a busy server's
        shutdown past any short wait, which is no failure of what the tests proved)."""
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
