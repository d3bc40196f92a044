"""The packaged API function's side of sign-in, in a clean interpreter as Lambda runs it (only the
unpacked app and boto3 on sys.path, `python3.12 -I -S`), with the stage's environment: its
container's identity provider invites a person into the deployed pool, verifies the pool's token
(joserfc and cryptography from the zip, the keys fetched with urllib3), and disables and enables
them. The person's own sign-in (theirs, not the function's) is made by this runner in between.

Every AWS call the function's code makes is written to the file `calls` names, as
tests/deploy/lambda_runner.py writes them (function `api_handler`), for the role check.

argv: a JSON file of {"paths": [...], "calls": path}. Prints one JSON line of what it saw."""
import json
import os
import sys

SETUP = json.load(open(sys.argv[1]))
sys.path[:0] = SETUP["paths"]

import botocore.handlers  # noqa: E402

recording = []
calls_file = open(SETUP["calls"], "w", buffering=1)


def record_call(params, model, context, **_):
    if recording:
        calls_file.write(json.dumps({
            "function": "api_handler", "service": model.service_model.signing_name, "operation": model.name,
            "presigned": False, "params": {k: v for k, v in params.items() if k == "UserPoolId"}}) + "\n")


botocore.handlers.BUILTIN_HANDLERS.append(("before-parameter-build", record_call))


def main():
    import cryptography
    import joserfc

    from chalicelib.adapters.identity import key_set_url, password_sign_in
    from chalicelib.container import container
    from chalicelib.domain.errors import Unauthorized

    services = container()
    settings = services.settings
    recording.append(True)
    identity = services.cognito
    sub = identity.invite("Proof.Person@proof.test", "Proof Person")
    resent = identity.invite("proof.person@proof.test", "Proof Person")  # a retried invite: AdminGetUser, RESEND
    recording.clear()
    # The person signs in with the temporary password their invitation mailed (set here: moto mails none).
    cognito = services.aws.client("cognito-idp")
    cognito.admin_set_user_password(UserPoolId=identity.pool_id, Username="proof.person@proof.test",
                                    Password="Temporary-Pass-1", Permanent=False)
    tokens = password_sign_in(cognito, identity.pool_id, identity.client_id, "proof.person@proof.test",
                              "Temporary-Pass-1", new_password="Chosen-Password-2")
    recording.append(True)
    verified = identity.verify(tokens["IdToken"])
    header, payload, signature = tokens["IdToken"].split(".")
    forged = ".".join([header, payload, signature[:10] + ("B" if signature[10] == "A" else "A") + signature[11:]])
    try:
        identity.verify(forged)
        tampered = "accepted"
    except Unauthorized as refused:
        tampered = refused.message
    identity.disable(sub)
    identity.enable(sub)
    recording.clear()
    print(json.dumps({
        "sub": sub, "resent": resent, "verified_subject": verified.subject, "verified_email": verified.email, "tampered": tampered,
        "pool_id": settings.user_pool_id, "client_id": settings.user_pool_client_id,
        "keys_here": key_set_url(settings.region, identity.pool_id, os.environ["AWS_ENDPOINT_URL"]),
        "keys_on_aws": key_set_url(settings.region, identity.pool_id),
        "joserfc": joserfc.__file__, "cryptography": cryptography.__file__,
    }))


if __name__ == "__main__":
    main()
