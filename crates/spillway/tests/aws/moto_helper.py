"""Test helper for the AWS tests: plays the parts of AWS that moto does not (EventBridge events the test chooses)
and reads what the tests check (instances with their tags and user-data). Run with the moto venv's python.

  moto_helper.py ENDPOINT setup NAME          -> {"image_id", "queue_url"}: launch template NAME, queue, rules
  moto_helper.py ENDPOINT instances PREFIX    -> [{"id", "state", "type", "lifecycle", "tags", "user_data"}]
  moto_helper.py ENDPOINT event KIND ID       -> puts an EC2 event (interruption | rebalance) for instance ID
  moto_helper.py ENDPOINT terminate ID        -> terminates instance ID (what a reclaim does)
  moto_helper.py ENDPOINT orphan CLUSTER NODE -> launches an instance tagged for CLUSTER and NODE, prints its id
  moto_helper.py ENDPOINT subnets             -> [{"id", "zone"}]: the default VPC's subnets, by zone
"""
import base64, json, sys
import boto3

KW = dict(region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing")
KINDS = {"interruption": "EC2 Spot Instance Interruption Warning", "rebalance": "EC2 Instance Rebalance Recommendation"}


def client(name, endpoint):
    return boto3.client(name, endpoint_url=endpoint, **KW)


def setup(endpoint, name):
    ec2, sqs, events = client("ec2", endpoint), client("sqs", endpoint), client("events", endpoint)
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    ec2.create_launch_template(LaunchTemplateName=name, LaunchTemplateData={"ImageId": image})
    queue = sqs.create_queue(QueueName=name)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    pattern = {"source": ["aws.ec2"], "detail-type": list(KINDS.values()) + ["EC2 Instance State-change Notification"]}
    events.put_rule(Name=name, EventPattern=json.dumps(pattern))
    events.put_targets(Rule=name, Targets=[{"Id": "spillway", "Arn": arn}])
    print(json.dumps({"image_id": image, "queue_url": queue}))


def instances(endpoint, prefix):
    ec2 = client("ec2", endpoint)
    out = []
    for r in ec2.describe_instances()["Reservations"]:
        for i in r["Instances"]:
            tags = {t["Key"]: t["Value"] for t in i.get("Tags", [])}
            if not tags.get("spillway:cluster", "").startswith(prefix):
                continue
            ud = ec2.describe_instance_attribute(InstanceId=i["InstanceId"], Attribute="userData").get("UserData", {})
            text = base64.b64decode(ud["Value"]).decode() if ud.get("Value") else ""
            out.append({"id": i["InstanceId"], "state": i["State"]["Name"], "type": i["InstanceType"],
                        "lifecycle": i.get("InstanceLifecycle", "on-demand"), "tags": tags, "user_data": text,
                        "zone": i.get("Placement", {}).get("AvailabilityZone", "")})
    print(json.dumps(out))


def event(endpoint, kind, instance):
    detail = {"instance-id": instance}
    if kind == "interruption":
        detail["instance-action"] = "terminate"
    entry = {"Source": "aws.ec2", "DetailType": KINDS[kind], "Detail": json.dumps(detail), "Resources": []}
    res = client("events", endpoint).put_events(Entries=[entry])
    assert res["FailedEntryCount"] == 0, res


def terminate(endpoint, instance):
    client("ec2", endpoint).terminate_instances(InstanceIds=[instance])


def orphan(endpoint, cluster, node):
    ec2 = client("ec2", endpoint)
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    tags = [{"Key": "spillway:cluster", "Value": cluster}, {"Key": "spillway:node", "Value": node}]
    r = ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, InstanceType="p3.2xlarge",
                          TagSpecifications=[{"ResourceType": "instance", "Tags": tags}])
    print(r["Instances"][0]["InstanceId"])


def subnets(endpoint):
    found = client("ec2", endpoint).describe_subnets(Filters=[{"Name": "default-for-az", "Values": ["true"]}])
    out = sorted(({"id": s["SubnetId"], "zone": s["AvailabilityZone"]} for s in found["Subnets"]), key=lambda s: s["zone"])
    print(json.dumps(out))


if __name__ == "__main__":
    endpoint, cmd, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    {"setup": setup, "instances": instances, "event": event, "terminate": terminate, "orphan": orphan,
     "subnets": subnets}[cmd](endpoint, *args)
